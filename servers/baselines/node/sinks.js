'use strict';
// Sinks: where `/log` records and `/ws` messages go (servers/core/sinks.py describes them).
//
// - empty: counts and drops.
// - file: one JSON line per record appended through an fs.WriteStream. The stream is corked
//   while records gather and uncorked as one writev: at the next loop turn when a `/log`
//   request waits (every request parsed in this turn shares the write), at most
//   FLUSH_INTERVAL_MS after a WebSocket message. `/log` answers in the write's callback,
//   when its line was handed to the OS (the writes run on libuv's thread pool).
// - mongo: one document per record through the official driver, database `--mongo-db`,
//   collection records, write concern `--mongo-w`; an error answers `/log` 503.
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
  }

  storeAndWait() {
    this._state.stored += 1;
    return Promise.resolve();
  }

  async close() {}
}

class FileSink {
  constructor(state, path) {
    this._state = state;
    this._stream = fs.createWriteStream(path, { flags: 'a' });
    this._stream.on('error', (error) => {
      // The stream is destroyed; each pending and later write's callback gets an error.
      process.stderr.write(`servers: file sink ${path}: ${error.message}\n`);
    });
    this._corked = false;
    this._flushTimer = null;
    this._flushImmediate = null;
  }

  _append(record, done) {
    const state = this._state;
    state.backlog += 1;
    if (!this._corked) {
      this._stream.cork();
      this._corked = true;
    }
    this._stream.write(encodeRecord(record), (error) => {
      state.backlog -= 1;
      if (error) state.sinkErrors += 1;
      else state.stored += 1;
      if (done !== null) done(error);
    });
  }

  store(record) {
    this._append(record, null);
    if (this._flushTimer === null && this._flushImmediate === null) {
      this._flushTimer = setTimeout(() => this._flush(), contract.FLUSH_INTERVAL_MS);
    }
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
    if (this._corked) {
      this._corked = false;
      this._stream.uncork();
    }
  }

  /** Write what is pending, then close the file (shutdown). */
  close() {
    this._flush();
    const stream = this._stream;
    return new Promise((resolve) => {
      if (stream.closed) {
        resolve();
        return;
      }
      stream.once('close', resolve);
      stream.end();
    });
  }
}

class MongoSink {
  /** @param {import('./mongo').LazyMongo} mongo the process's shared client */
  constructor(state, mongo, w) {
    this._state = state;
    this._mongo = mongo;
    this._w = w;
    this._collection = null;
    this._pending = new Set();
  }

  async storeAndWait(record) {
    const state = this._state;
    if (this._collection === null) {
      this._collection = this._mongo
        .db()
        .collection(contract.MONGO_COLLECTION, { writeConcern: { w: this._w } });
    }
    state.backlog += 1;
    try {
      await this._collection.insertOne(record); // adds _id to `record`: nothing else reads it
    } catch (error) {
      state.sinkErrors += 1;
      throw new SinkUnavailable(error.message);
    } finally {
      state.backlog -= 1;
    }
    state.stored += 1;
  }

  store(record) {
    const insert = this.storeAndWait(record).catch(() => {}); // counted in sink_errors
    this._pending.add(insert);
    insert.then(() => this._pending.delete(insert));
  }

  /** Wait for the inserts under way (at most `timeoutMs`); the client is closed by its owner. */
  async close(timeoutMs = 2000) {
    if (this._pending.size === 0) return;
    let timer;
    const expired = new Promise((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    await Promise.race([Promise.all(this._pending), expired]);
    clearTimeout(timer);
  }
}

/** The sink `options` ask for. */
function openSink(options, state, mongo) {
  if (options.sink === 'file') return new FileSink(state, options.sinkPath);
  if (options.sink === 'mongo') return new MongoSink(state, mongo, options.mongoW);
  return new EmptySink(state);
}

module.exports = { openSink, encodeRecord, SinkUnavailable };
