/**
 * A path with a stray or undecodable percent sign (`/v1/%`, `/v1/pets/%zz`, `/v1/pets/1/%ff`)
 * makes the router give up before any hook runs, so the answer would skip authentication, rate
 * limiting and the Error contract. Escaped as `%25`, such a path is plain text instead: it
 * matches no route (404) or fails a parameter's validation (400), through the whole pipeline.
 * Used as Fastify's rewriteUrl; a well-formed URL (nearly every one) is returned as it is.
 */
export function escapeMalformedPath({ url = '/' }: { url?: string }): string {
  const queryAt = url.indexOf('?');
  const path = queryAt === -1 ? url : url.slice(0, queryAt);
  if (!path.includes('%')) return url;
  try {
    decodeURIComponent(path);
    return url;
  } catch {
    return path.replaceAll('%', '%25') + (queryAt === -1 ? '' : url.slice(queryAt));
  }
}
