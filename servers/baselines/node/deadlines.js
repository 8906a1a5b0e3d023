'use strict';
// The contract's slow-client deadlines (docs/contract.md, "Slow clients") for both variants.
//
// Node's own limits do not count from where the contract does: headersTimeout starts a
// kept-alive connection's next head at its first byte, after keepAliveTimeout (an idle
// timer, reset by every byte), and requestTimeout counts the body from the request's first
// byte, not from its head. So every connection carries one deadline of its own, moved at
// the three moments the contract names (opened, head arrived, response finished), and one
// sweep closes the connections past theirs. A request costs a clock read, two field writes
// and a 'finish' listener; no timer is armed or cleared per request.

const { performance } = require('node:perf_hooks');

const kWatch = Symbol('clientDeadline');
const MAX_SWEEP_INTERVAL_MS = 500;

/** One connection's deadline: for its next head, or (`request` set) for that body. */
class Watch {
  constructor(socket, dueAtMs, headTimeoutMs) {
    this.socket = socket;
    this.dueAtMs = dueAtMs;
    this.request = null; // the request whose response is not finished yet
    const watch = this;
    // A 'finish' listener: `this` is the ServerResponse. With pipelining a later request
    // may have arrived meanwhile; only the last one's response starts the next head's wait.
    this.onResponseFinish = function onResponseFinish() {
      if (this.req !== watch.request) return;
      watch.request = null;
      watch.dueAtMs = performance.now() + headTimeoutMs;
    };
  }
}

class ClientDeadlines {
  /**
   * The deadlines of one HTTP server's connections (options.js: headTimeoutMs, bodyTimeoutMs).
   * @param {number} headTimeoutMs a whole head, from opening or the previous response's end
   * @param {number} bodyTimeoutMs a whole body, from the end of its head
   */
  constructor(headTimeoutMs, bodyTimeoutMs) {
    this.headTimeoutMs = headTimeoutMs;
    this.bodyTimeoutMs = bodyTimeoutMs;
    this._watches = new Set();
    // A deadline is noticed within a quarter of the shorter one, and at most 500 ms late.
    const sweepMs = Math.min(MAX_SWEEP_INTERVAL_MS, headTimeoutMs / 4, bodyTimeoutMs / 4);
    setInterval(() => this._sweep(), Math.max(1, Math.round(sweepMs))).unref();
  }

  /** A new connection ('connection' event): its first head is due. */
  opened(socket) {
    const watch = new Watch(socket, performance.now() + this.headTimeoutMs, this.headTimeoutMs);
    socket[kWatch] = watch;
    this._watches.add(watch);
  }

  /** The connection closed, or was upgraded to a WebSocket (exempt from the deadlines). */
  forget(socket) {
    const watch = socket[kWatch];
    if (watch !== undefined) this._watches.delete(watch);
  }

  /** A request's head arrived ('request' event): its body is due, then its response is ours. */
  headArrived(req, res) {
    const watch = req.socket[kWatch];
    watch.request = req;
    watch.dueAtMs = performance.now() + this.bodyTimeoutMs;
    res.on('finish', watch.onResponseFinish);
  }

  _sweep() {
    const now = performance.now();
    for (const watch of this._watches) {
      const request = watch.request;
      // A whole request is in and its response not finished: the server's time, not the client's.
      if (request !== null && request.complete) continue;
      if (now > watch.dueAtMs) {
        this._watches.delete(watch);
        watch.socket.destroy(); // no 408: a closed connection says it, and stores nothing
      }
    }
  }
}

module.exports = { ClientDeadlines };
