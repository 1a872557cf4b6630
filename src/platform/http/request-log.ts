import { LogController, type FastifyReply, type FastifyRequest } from 'fastify';
import { roundMs } from '../observability/log-output.js';

/** One line per request, when it completes, with what an operator needs to find it again. */
export class RequestLog extends LogController {
  // A client that goes away before its answer is handed over fires neither the response's
  // 'finish' nor its 'error', which requestCompleted waits for: its line is written as it goes.
  override incomingRequest(request: FastifyRequest, reply: FastifyReply) {
    reply.raw.once('close', () => {
      if (!reply.raw.writableEnded) reply.log.info(lineOf(request, reply, undefined, true), 'request');
    });
  }

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply) {
    const line = lineOf(request, reply, reply.statusCode);
    if (error) reply.log.error({ ...line, err: error }, 'request failed');
    else reply.log.info(line, 'request');
  }
}

/** A request's line: its status once answered, or, its client gone before, `clientClosed` (nginx's 499) and none. */
const lineOf = (request: FastifyRequest, reply: FastifyReply, status: number | undefined, clientClosed?: true) => ({
  method: request.method,
  route: request.routeOptions.url,
  status,
  clientClosed,
  ms: roundMs(reply.elapsedTime),
  keyId: request.apiKey?.id,
  // On the admin listener: who called (never the token itself).
  adminTokenId: request.adminToken?.id,
});
