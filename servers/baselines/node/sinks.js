'use strict';
// Sinks: where `/log` records and `/ws` messages go (servers/core/sinks.py describes them).
//
// - empty: counts and drops.
// - file: one JSON line per record appended to the file. Records gather and leave as one
//   write: at the next loop turn when a `/log` request waits (every request parsed in this
//   turn shares the write), at most FLUSH_INTERVAL_MS after a WebSocket message. `/log`
//   answers in the write's callback, when its line was handed to the OS (and fsync'ed with
//   --durable; the writes run on libuv's thread pool). A write failing part-way is cut
//   back to the last whole record.
// - mongo: one document per record through the official driver, database `--mongo-db`,
//   collection records, write concern `--mongo-w`, by group commit (GroupCommit below, the
//   rule of servers/core/sinks.py): the records waiting go out in one ordered insertMany
//   as soon as the previous batch returned, or at once when `--mongo-batch` wait; `/log`
//   answers when its batch was acknowledged, 503 when its batch failed.
//
// Every sink offers store(record) (WebSocket messages: no one waits), storeAndWait(record)
// (a promise: /log replies when it resolves; SinkUnavailable means 503) and close().

const fs = require('node:fs');

const contract = require('./contract');

class SinkUnavailable extends Error {}

/** One record as one JSON line: byte for byte what servers/core/sinks.py's encode_record writes. */
function encodeRecord(record) {
  return `${JSON.stringify(record)}\n`;
}

class EmptySink {
  constructor(state) {
    this._state = state;
  }

  store() {
    this._state.stored += 1;
    return true;
  }

  storeAndWait() {
    this._state.stored += 1;
    return Promise.resolve();
  }

  async close() {}
}

class FileSink {
  constructor(state, path, durable) {
    this._state = state;
    this._durable = durable;
    this._fd = fs.openSync(path, 'a'); // O_APPEND: the workers of --workers N share the file
    this._lines = [];
    this._callbacks = []; // one per line: null for a WebSocket message
    this._writing = false;
    this._again = false; // a flush was asked for while a write was under way
    this._idle = []; // close() waiting for the last write
    this._broken = null; // a torn write could not be cut back: every later write fails
    this._flushTimer = null;
    this._flushImmediate = null;
  }

  _append(record, done) {
    this._state.backlog += 1;
    this._lines.push(encodeRecord(record));
    this._callbacks.push(done);
  }

  store(record) {
    this._append(record, null);
    if (this._flushTimer === null && this._flushImmediate === null) {
      this._flushTimer = setTimeout(() => this._flush(), contract.FLUSH_INTERVAL_MS);
    }
    return true;
  }

  storeAndWait(record) {
    return new Promise((resolve, reject) => {
      this._append(record, (error) => (error ? reject(new SinkUnavailable(error.message)) : resolve()));
      if (this._flushImmediate === null) {
        this._flushImmediate = setImmediate(() => this._flush());
      }
    });
  }

  _flush() {
    if (this._flushTimer !== null) clearTimeout(this._flushTimer);
    if (this._flushImmediate !== null) clearImmediate(this._flushImmediate);
    this._flushTimer = null;
    this._flushImmediate = null;
    if (this._writing) {
      this._again = true;
      return;
    }
    if (this._lines.length === 0) {
      const idle = this._idle;
      this._idle = [];
      for (const resolve of idle) resolve();
      return;
    }
    const data = Buffer.from(this._lines.join(''));
    const callbacks = this._callbacks;
    this._lines = [];
    this._callbacks = [];
    this._writing = true;
    this._writeBatch(data, (error) => {
      const state = this._state;
      state.backlog -= callbacks.length;
      if (error) state.sinkErrors += callbacks.length;
      else state.stored += callbacks.length;
      for (const done of callbacks) if (done !== null) done(error);
      this._writing = false;
      if (this._again || this._idle.length > 0) {
        this._again = false;
        this._flush();
      }
    });
  }

  /** Every byte of `data` to the OS (and the disk when durable), or none of them: a write
   * failing part-way (a full disk) is cut back, so the next batch starts a whole line. */
  _writeBatch(data, done) {
    if (this._broken !== null) {
      done(new Error(`file sink unusable after a torn write: ${this._broken}`));
      return;
    }
    let offset = 0;
    const fail = (error) => {
      if (offset === 0) {
        done(error);
        return;
      }
      // Our bytes are the file's tail: a full disk fails the other workers' appends too.
      fs.fstat(this._fd, (statError, stats) => {
        if (statError) {
          this._broken = statError.message;
          done(error);
          return;
        }
        fs.ftruncate(this._fd, Math.max(0, stats.size - offset), (truncateError) => {
          if (truncateError) this._broken = truncateError.message;
          done(error);
        });
      });
    };
    const step = () => {
      if (offset === data.length) {
        if (this._durable) fs.fsync(this._fd, (error) => (error ? fail(error) : done(null)));
        else done(null);
        return;
      }
      fs.write(this._fd, data, offset, data.length - offset, null, (error, written) => {
        if (error) {
          fail(error);
          return;
        }
        offset += written;
        step();
      });
    };
    step();
  }

  /** Write what is pending, then close the file (shutdown). */
  close() {
    return new Promise((resolve) => {
      this._idle.push(resolve);
      this._flush();
    }).then(() => new Promise((resolve) => fs.close(this._fd, () => resolve())));
  }
}

/**
 * The mongo sink's group commit, without I/O: servers/core/sinks.py's GroupCommit, rule for
 * rule. Records wait in arrival order; a batch of at most `maxRecords` is due when no batch
 * of this sink is in flight, or at once when `maxRecords` wait. It keeps `backlog`,
 * `stored` and `sinkErrors` and bounds the WebSocket messages waiting or in flight.
 */
class GroupCommit {
  constructor(state, maxRecords) {
    this._state = state;
    this.maxRecords = maxRecords;
    this._documents = [];
    this._waiters = []; // one per document: null for a WebSocket message
    this.messagesPending = 0;
    this.inFlight = 0;
    this.closed = false;
  }

  _take(record, waiter) {
    if (this.closed) {
      this._state.sinkErrors += 1;
      throw new SinkUnavailable('the mongo sink is closed');
    }
    // insertMany adds `_id` to the documents it is given: a copy, not the caller's record
    this._documents.push({ ...record });
    this._waiters.push(waiter);
    this._state.backlog += 1;
  }

  /** A `/log` request's record; throws SinkUnavailable once the sink is closed. */
  takeRequest(record, waiter) {
    this._take(record, waiter);
  }

  /** A WebSocket message's record; false (counted in sinkErrors) when the queue is full. */
  takeMessage(record) {
    if (this.messagesPending >= contract.WS_SINK_MAX_PENDING) {
      this._state.sinkErrors += 1;
      return false;
    }
    try {
      this._take(record, null);
    } catch (error) {
      return true; // after shutdown: counted; the connection is closing with 1001
    }
    this.messagesPending += 1;
    return true;
  }

  get idle() {
    return this._documents.length === 0 && this.inFlight === 0;
  }

  full() {
    return this._documents.length >= this.maxRecords;
  }

  due() {
    return this._documents.length > 0 && (this.inFlight === 0 || this.full());
  }

  /** {documents, waiters, messages} to insert now, or null when none is due. */
  nextBatch() {
    if (!this.due()) return null;
    const documents = this._documents.splice(0, this.maxRecords);
    const taken = this._waiters.splice(0, this.maxRecords);
    const waiters = taken.filter((waiter) => waiter !== null);
    this.inFlight += 1;
    return { documents, waiters, messages: taken.length - waiters.length };
  }

  /** Count the batch as stored or failed; its waiters, for the caller to answer. */
  settle(batch, stored) {
    const count = batch.documents.length;
    this.inFlight -= 1;
    this.messagesPending -= batch.messages;
    this._state.backlog -= count;
    if (stored) this._state.stored += count;
    else this._state.sinkErrors += count;
    return batch.waiters;
  }
}

class MongoSink {
  /**
   * Group commit through the official driver: one ordered insertMany per batch, a promise
   * per `/log` request settled when its batch was acknowledged (or failed: 503).
   * @param {import('./mongo').LazyMongo} mongo the process's shared client
   * @param {number} writeTimeoutMs a batch unanswered this long fails (options.js)
   */
  constructor(state, mongo, w, durable, maxRecords, writeTimeoutMs) {
    this._mongo = mongo;
    this._w = w;
    this._durable = durable; // journaled inserts (j: true)
    this._writeTimeoutMs = writeTimeoutMs;
    this._collection = null;
    this._commit = new GroupCommit(state, maxRecords);
    this._flushImmediate = null;
    this._idle = []; // close() waiting for the last batch
  }

  storeAndWait(record) {
    return new Promise((resolve, reject) => {
      this._commit.takeRequest(record, { resolve, reject }); // throws: rejected
      this._schedule();
    });
  }

  /** False, the record refused and counted in sink_errors, when WS_SINK_MAX_PENDING
   * messages already wait for their inserts. */
  store(record) {
    if (!this._commit.takeMessage(record)) return false;
    this._schedule();
    return true;
  }

  /** A full batch goes now; otherwise what is due goes on the loop's next turn
   * (setImmediate), so every request parsed in this turn shares the batch. */
  _schedule() {
    if (this._commit.full()) this._sendDue();
    else if (this._flushImmediate === null && this._commit.due()) {
      this._flushImmediate = setImmediate(() => {
        this._flushImmediate = null;
        this._sendDue();
      });
    }
  }

  _sendDue() {
    for (let batch = this._commit.nextBatch(); batch !== null; batch = this._commit.nextBatch()) {
      this._insert(batch);
    }
  }

  _insert(batch) {
    if (this._collection === null) {
      this._collection = this._mongo
        .db()
        .collection(contract.MONGO_COLLECTION, {
          writeConcern: this._durable ? { w: this._w, journal: true } : { w: this._w },
        });
    }
    let done = false;
    // the driver can leave an insert unsettled for good (a database killed mid-load): the
    // batch fails at the deadline, and whatever the driver says later is ignored
    const deadline = setTimeout(() => {
      settled(new Error(`no reply within ${this._writeTimeoutMs} ms`));
    }, this._writeTimeoutMs).unref();
    const settled = (error) => {
      if (done) return;
      done = true;
      clearTimeout(deadline);
      for (const waiter of this._commit.settle(batch, error === null)) {
        if (error === null) waiter.resolve();
        else waiter.reject(new SinkUnavailable(error.message));
      }
      this._sendDue(); // the records that waited for this batch go now
      if (this._commit.idle) {
        const idle = this._idle;
        this._idle = [];
        for (const resolve of idle) resolve();
      }
    };
    this._collection.insertMany(batch.documents, { ordered: true }).then(
      () => settled(null),
      (error) => settled(error),
    );
  }

  /** Insert everything taken (at most `timeoutMs`); the client is closed by its owner. */
  async close(timeoutMs = 2000) {
    if (this._flushImmediate !== null) {
      clearImmediate(this._flushImmediate);
      this._flushImmediate = null;
    }
    this._sendDue();
    if (!this._commit.idle) {
      let timer;
      const expired = new Promise((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
      });
      await Promise.race([new Promise((resolve) => this._idle.push(resolve)), expired]);
      clearTimeout(timer);
    }
    this._commit.closed = true;
  }
}

/** The sink `options` ask for. */
function openSink(options, state, mongo) {
  if (options.sink === 'file') return new FileSink(state, options.sinkPath, options.durable);
  if (options.sink === 'mongo') {
    return new MongoSink(
      state,
      mongo,
      options.mongoW,
      options.durable,
      options.mongoBatch,
      options.writeTimeoutMs,
    );
  }
  return new EmptySink(state);
}

module.exports = { openSink, encodeRecord, SinkUnavailable };
