import { LogController, type FastifyReply, type FastifyRequest } from 'fastify';
import { roundMs } from '../observability/log-output.js';
import { isPreflight } from './cors.js';

/**
 * Who made a request, as its line names them: the field (`keyId` on the API, `adminTokenId` on
 * the admin API) and its id, read by the feature that knows the caller (never a credential itself).
 */
export interface RequestLogCaller {
  field: string;
  idOf: (request: FastifyRequest) => number | undefined;
}

/** One line per request, when it completes, with what an operator needs to find it again. */
export class RequestLog extends LogController {
  readonly #caller: RequestLogCaller;

  constructor(caller: RequestLogCaller) {
    super();
    this.#caller = caller;
  }

  // A client that goes away before its answer is handed over fires neither the response's
  // 'finish' nor its 'error', which requestCompleted waits for: its line is written as it goes.
  override incomingRequest(request: FastifyRequest, reply: FastifyReply) {
    reply.raw.once('close', () => {
      if (!reply.raw.writableEnded) reply.log.info(this.#lineOf(request, reply, undefined, true), 'request');
    });
  }

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply) {
    const line = this.#lineOf(request, reply, reply.statusCode);
    if (error) reply.log.error({ ...line, err: error }, 'request failed');
    // A browser asks before most of its calls; the answer costs nothing and says little (its origin, allowed or not).
    else if (isPreflight(request)) reply.log.debug({ ...line, origin: request.headers.origin }, 'preflight');
    else reply.log.info(line, 'request');
  }

  /** A request's line: its status once answered, or, its client gone before, `clientClosed` (nginx's 499) and none. */
  #lineOf(request: FastifyRequest, reply: FastifyReply, status: number | undefined, clientClosed?: true) {
    return {
      method: request.method,
      route: request.routeOptions.url,
      status,
      clientClosed,
      ms: roundMs(reply.elapsedTime),
      [this.#caller.field]: this.#caller.idOf(request),
    };
  }
}
