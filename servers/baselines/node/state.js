'use strict';
// Per-process counters, event-loop lag, GC timing and the telemetry line: what
// servers/core/state.py's ServerState is for the Python servers, with the same fields.

const { PerformanceObserver, performance } = require('node:perf_hooks');

const contract = require('./contract');

/** Wall-clock seconds with sub-millisecond resolution (Python's time.time()). */
function epochSeconds() {
  return (performance.timeOrigin + performance.now()) / 1000;
}

function round3(x) {
  return Math.round(x * 1000) / 1000;
}

class ServerState {
  /**
   * Hot paths bump the plain integer fields directly (`state.requests += 1`).
   * @param {string} framework the variant name (node-http, node-express)
   * @param {number} worker this process's index among the workers
   */
  constructor(framework, worker) {
    this.framework = framework;
    this.loop = 'libuv';
    this.worker = worker;
    this.port = 0;
    this.mcPort = 0; // the memcached socket service's port (--mc-socket-port); 0 when not serving
    this.open = 0;
    this.maxOpen = 0;
    this.requests = 0;
    this.messages = 0;
    this.bad = 0;
    this.stored = 0;
    this.sinkErrors = 0;
    this.backlog = 0;
    this.backendErrors = 0; // memcached or GridFS reads that failed (answered 503)
    this.seq = 0;
    // records' ids: unique across the workers of one server and the instances of lb:N
    this._idPrefix = `${worker}-${process.pid}-`;
    this._tickLast = null;
    this._tickLagSumMs = 0;
    this._tickLagMaxMs = 0;
    this._tickCount = 0;
    this.gcCollections = 0;
    this._gcPauseMs = 0;
    this._gcObserver = null;
  }

  // -- connections ---------------------------------------------------------------------
  connectionOpened() {
    this.open += 1;
    if (this.open > this.maxOpen) this.maxOpen = this.open;
  }

  connectionClosed() {
    this.open -= 1;
  }

  /** The body of `GET /counter`. */
  counterPayload() {
    return Buffer.from(
      JSON.stringify({ open: this.open, max_open: this.maxOpen, requests: this.requests }),
    );
  }

  // -- records -----------------------------------------------------------------------------
  /** One sink record (`/log` request or `/ws` message), numbered in arrival order. */
  makeRecord(method, path, headers, body) {
    this.seq += 1;
    const id = `${this._idPrefix}${this.seq}`;
    return { id, seq: this.seq, time: epochSeconds(), method, path, headers, body };
  }

  // -- event-loop lag and GC ------------------------------------------------------------------
  /** Start the 10 ms tick timer and the GC observer; both keep running until `stop`. */
  start() {
    this._tickTimer = setInterval(() => this.tick(), contract.TICK_INTERVAL_MS);
    this._gcObserver = new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) {
        this.gcCollections += 1;
        this._gcPauseMs += entry.duration;
      }
    });
    this._gcObserver.observe({ entryTypes: ['gc'] });
  }

  stop() {
    clearInterval(this._tickTimer);
    if (this._gcObserver !== null) this._gcObserver.disconnect();
  }

  /** Called by the 10 ms timer; the lag is the gap minus 10 ms. */
  tick() {
    const now = performance.now();
    if (this._tickLast !== null) {
      const lagMs = Math.max(0, now - this._tickLast - contract.TICK_INTERVAL_MS);
      this._tickLagSumMs += lagMs;
      this._tickCount += 1;
      if (lagMs > this._tickLagMaxMs) this._tickLagMaxMs = lagMs;
    }
    this._tickLast = now;
  }

  // -- telemetry ---------------------------------------------------------------------------------
  /** The current telemetry record (contract.TELEMETRY_FIELDS, then heap sizes); starts a new tick window. */
  telemetry() {
    const memory = process.memoryUsage();
    const record = {
      t: round3(epochSeconds()),
      pid: process.pid,
      open: this.open,
      max_open: this.maxOpen,
      requests: this.requests,
      messages: this.messages,
      bad: this.bad,
      tick_avg_ms: round3(this._tickCount ? this._tickLagSumMs / this._tickCount : 0),
      tick_max_ms: round3(this._tickLagMaxMs),
      gc_collections: this.gcCollections,
      gc_pause_ms: round3(this._gcPauseMs),
      stored: this.stored,
      sink_errors: this.sinkErrors,
      backlog: this.backlog,
      rss_bytes: memory.rss,
      framework: this.framework,
      loop: this.loop,
      port: this.port,
      worker: this.worker,
      mc_port: this.mcPort,
      backend_errors: this.backendErrors,
      // Node-only extras: V8's heap, which RSS hides
      heap_used_bytes: memory.heapUsed,
      heap_total_bytes: memory.heapTotal,
    };
    this._tickLagSumMs = 0;
    this._tickLagMaxMs = 0;
    this._tickCount = 0;
    return record;
  }

  /**
   * Write one telemetry line to stdout; `done` runs once it was handed to the OS.
   * One write of one line under PIPE_BUF: lines of several workers never interleave.
   */
  emitTelemetry(done) {
    process.stdout.write(`${JSON.stringify(this.telemetry())}\n`, done);
  }
}

module.exports = { ServerState, epochSeconds };
