import { LogController, type FastifyReply, type FastifyRequest } from 'fastify';
import { roundMs } from '../observability/log-output.js';

/** One line per request, when it completes, with what an operator needs to find it again. */
export class RequestLog extends LogController {
  override incomingRequest() {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply) {
    const line = {
      method: request.method,
      route: request.routeOptions.url,
      status: reply.statusCode,
      ms: roundMs(reply.elapsedTime),
      keyId: request.apiKey?.id,
      // On the admin listener: who called (never the token itself).
      adminTokenId: request.adminToken?.id,
    };
    if (error) reply.log.error({ ...line, err: error }, 'request failed');
    else reply.log.info(line, 'request');
  }
}
