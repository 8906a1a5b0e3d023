'use strict';
// memcached: the text protocol as far as the socket service needs it (servers/core/memcache.py, ported
// function for function) and the pool of contract.MC_POOL_SIZE persistent connections that
// `/mc/{key}` and the memcached socket service (`--mc-socket-port`) share.
//
// Keys are JS strings of single-byte characters (the socket service reads its lines as latin1, and a
// key from a URL must pass validKey, which allows printable ASCII only), so a key's string
// length is its byte length.

const net = require('node:net');

const contract = require('./contract');

const { MC_TIMEOUT_MS } = contract; // connect and each reply
const TIMEOUT_SWEEP_MS = 250;
const VALUE_TRAILER = Buffer.from('\r\nEND\r\n');

class MemcacheError extends Error {}

/** memcached's key rule: 1..250 bytes, no spaces or control characters. */
function validKey(key) {
  if (key.length === 0 || key.length > contract.MC_MAX_KEY_BYTES) return false;
  for (let i = 0; i < key.length; i += 1) {
    const code = key.charCodeAt(i);
    if (code <= 32 || code >= 127) return false;
  }
  return true;
}

/**
 * One complete `get` reply from the start of `buffer`: {value (null on a miss), used}, or
 * null when more bytes are needed. Throws MemcacheError on an error reply.
 */
function parseGetReply(buffer) {
  const lineEnd = buffer.indexOf('\r\n');
  if (lineEnd < 0) {
    if (buffer.length > contract.MC_MAX_LINE_BYTES) {
      throw new MemcacheError(`no line end in ${buffer.length} bytes`);
    }
    return null;
  }
  const line = buffer.latin1Slice(0, lineEnd);
  if (line === 'END') return { value: null, used: lineEnd + 2 };
  const parts = line.split(' ').filter((part) => part !== '');
  if (parts.length < 4 || parts[0] !== 'VALUE') throw new MemcacheError(line.slice(0, 200));
  if (!/^\d+$/.test(parts[3])) throw new MemcacheError(`bad length in ${line}`);
  const dataStart = lineEnd + 2;
  const dataEnd = dataStart + Number(parts[3]);
  const total = dataEnd + VALUE_TRAILER.length;
  if (buffer.length < total) return null;
  if (!buffer.subarray(dataEnd, total).equals(VALUE_TRAILER)) {
    throw new MemcacheError('value not followed by END');
  }
  return { value: buffer.subarray(dataStart, dataEnd), used: total };
}

/** The socket service's answer to `get key`: the value block and END, or END alone on a miss. */
function encodeGetReply(key, value) {
  if (value === null) return contract.MC_REPLY_END;
  const header = Buffer.from(`VALUE ${key} 0 ${value.length}\r\n`, 'latin1');
  return Buffer.concat([header, value, VALUE_TRAILER]);
}

/** The first request line of `buffer` (without CRLF or LF) and the bytes it took, or null. */
function splitLine(buffer) {
  const lineEnd = buffer.indexOf(10); // \n
  if (lineEnd < 0) return null;
  const end = lineEnd > 0 && buffer[lineEnd - 1] === 13 ? lineEnd - 1 : lineEnd;
  return { line: buffer.latin1Slice(0, end), used: lineEnd + 1 };
}

/** What a socket-service client asked for in one line: {verb: get|quit|error, key, reply}. */
function parseCommand(line) {
  const parts = line.split(/[ \t\n\r\x0b\x0c]+/).filter((part) => part !== '');
  if (parts.length === 1 && parts[0] === 'quit') return { verb: 'quit' };
  if (parts.length === 2 && (parts[0] === 'get' || parts[0] === 'gets')) {
    if (!validKey(parts[1])) return { verb: 'error', reply: contract.MC_REPLY_BAD_KEY };
    return { verb: 'get', key: parts[1] };
  }
  return { verb: 'error', reply: contract.MC_REPLY_ERROR };
}

/** `--memcached HOST:PORT` as {host, port}; memcached's default when not given. */
function memcachedAddress(spec) {
  const text = spec || contract.MC_DEFAULT_ADDRESS;
  const colon = text.lastIndexOf(':');
  return { host: text.slice(0, colon) || '127.0.0.1', port: Number(text.slice(colon + 1)) };
}

/** One persistent connection to memcached, asked one `get` at a time. */
class McConnection {
  constructor(address, onBroken, onConnect) {
    this.socket = net.connect({ host: address.host, port: address.port, noDelay: true });
    this.socket.once('connect', onConnect);
    this._buffer = null;
    this._done = null; // the callback of the get under way
    this.sentAt = 0;
    this.broken = false;
    this._onBroken = onBroken;
    this.socket.on('data', (chunk) => this._onData(chunk));
    this.socket.on('error', (error) => this._fail(error));
    this.socket.on('close', () => this._fail(new MemcacheError('memcached closed the connection')));
  }

  get(key, done) {
    this._done = done;
    this._buffer = null;
    this.sentAt = performance.now();
    this.socket.write(`get ${key}\r\n`, 'latin1');
  }

  _onData(chunk) {
    const done = this._done;
    if (done === null) {
      this._fail(new MemcacheError('bytes from memcached nobody asked for'));
      return;
    }
    const buffer = this._buffer === null ? chunk : Buffer.concat([this._buffer, chunk]);
    let reply;
    try {
      reply = parseGetReply(buffer);
    } catch (error) {
      this._fail(error);
      return;
    }
    if (reply === null) {
      this._buffer = buffer;
      return;
    }
    this._done = null;
    this._buffer = null;
    if (reply.used !== buffer.length) {
      this._fail(new MemcacheError('bytes after the reply')); // out of step: do not reuse
      done(null, reply.value);
      return;
    }
    done(null, reply.value, this);
  }

  /** Fail the get under way (if any) and close for good; the pool drops this connection. */
  _fail(error) {
    if (this.broken) return;
    this.broken = true;
    this.socket.destroy();
    const done = this._done;
    this._done = null;
    this._onBroken(this);
    if (done !== null) done(error);
  }

  timedOut(now) {
    return this._done !== null && now - this.sentAt > MC_TIMEOUT_MS;
  }

  expire() {
    this._fail(new MemcacheError(`no reply within ${MC_TIMEOUT_MS} ms`));
  }

  close() {
    this.broken = true;
    this.socket.destroy();
  }
}

/**
 * `contract.MC_POOL_SIZE` persistent connections, opened on first use: once one connection
 * to memcached succeeds, the pool opens the rest, so it holds a fixed 50 as the
 * memcached-proxy study's did
 * (grown on demand instead, it kept opening connections whenever a burst beat its earlier
 * peak). Never more than 50 are open; an idle one is reused last-in first-out; a request
 * that finds none waits its turn; a connection that fails is dropped, and a later request
 * opens a fresh one (and refills the pool once it connects).
 */
class MemcachedPool {
  constructor(spec, state) {
    this._address = memcachedAddress(spec);
    this._state = state;
    this._idle = [];
    this._all = new Set();
    this._waiting = []; // [key, done] pairs, first come first served
    this._sweep = null;
    this._closed = false;
  }

  /**
   * `done(error, value)`: memcached's value for a valid `key` (a Buffer), null on a miss;
   * an error (counted in backend_errors) when memcached fails or does not answer in 2 s.
   */
  get(key, done) {
    if (this._closed) {
      process.nextTick(done, new MemcacheError('shutting down'), null);
      return;
    }
    let connection = this._idle.pop();
    if (connection === undefined) {
      if (this._all.size >= contract.MC_POOL_SIZE) {
        this._waiting.push([key, done]);
        return;
      }
      connection = this._open();
    }
    this._send(connection, key, done);
  }

  _open() {
    const connection = new McConnection(
      this._address,
      (broken) => this._drop(broken),
      () => this._fill(),
    );
    this._all.add(connection);
    if (this._sweep === null) {
      this._sweep = setInterval(() => this._expire(), TIMEOUT_SWEEP_MS);
      this._sweep.unref();
    }
    return connection;
  }

  /** memcached answers: open the connections the pool lacks (each one idle, or a waiter's). */
  _fill() {
    while (!this._closed && this._all.size < contract.MC_POOL_SIZE) this._release(this._open());
  }

  _send(connection, key, done) {
    connection.get(key, (error, value, reusable) => {
      if (error) this._state.backendErrors += 1;
      if (reusable !== undefined) this._release(reusable);
      done(error || null, value === undefined ? null : value);
    });
  }

  _release(connection) {
    const next = this._waiting.shift();
    if (next !== undefined) this._send(connection, next[0], next[1]);
    else this._idle.push(connection);
  }

  _drop(connection) {
    this._all.delete(connection);
    const index = this._idle.indexOf(connection);
    if (index >= 0) this._idle.splice(index, 1); // memcached closed an idle one
    const next = this._waiting.shift();
    if (next !== undefined) this._send(this._open(), next[0], next[1]);
  }

  _expire() {
    const now = performance.now();
    for (const connection of this._all) {
      if (connection.timedOut(now)) connection.expire();
    }
  }

  /** Shutdown: close every connection (a get under way fails, and its request gets 503). */
  close() {
    this._closed = true;
    if (this._sweep !== null) clearInterval(this._sweep);
    const waiting = this._waiting;
    this._waiting = [];
    for (const [, done] of waiting) done(new MemcacheError('shutting down'), null);
    for (const connection of [...this._all]) connection.expire();
  }
}

module.exports = {
  MemcachedPool,
  MemcacheError,
  validKey,
  parseGetReply,
  encodeGetReply,
  splitLine,
  parseCommand,
  memcachedAddress,
};
