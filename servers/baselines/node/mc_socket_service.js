'use strict';
// The memcached socket service (`--mc-socket-port`, the memcached-proxy study): memcached's
// `get <key>` and `quit`, answered through the same pool as `/mc/{key}`.
//
// The contract's rule (MC_SOCKET_MAX_IN_FLIGHT, servers/contract.py): request lines are
// answered in order, one get in flight per connection, as servers/core/memcache.py's
// SocketServiceSession does; the replies to every line one read brought go out in one write. Each get counts in `requests`, each
// connection in `open`/`max_open`, as HTTP's do.

const net = require('node:net');

const contract = require('./contract');
const memcache = require('./memcache');

class SocketServiceConnection {
  constructor(socket, pool, state, connections) {
    this._socket = socket;
    this._pool = pool;
    this._state = state;
    this._buffer = null;
    this._replies = [];
    this._busy = false;
    this._ended = false;
    socket.setNoDelay(true); // every socket: no 40 ms delayed-ACK stalls (docs/contract.md)
    state.connectionOpened();
    connections.add(socket);
    socket.on('data', (chunk) => {
      this._buffer = this._buffer === null ? chunk : Buffer.concat([this._buffer, chunk]);
      if (!this._busy) this._pump();
    });
    socket.on('error', () => {}); // reset by the client: 'close' follows
    socket.on('close', () => {
      this._ended = true;
      connections.delete(socket);
      state.connectionClosed();
    });
  }

  _pump() {
    while (!this._ended) {
      const taken = this._buffer === null ? null : memcache.splitLine(this._buffer);
      if (taken === null) {
        if (this._buffer !== null && this._buffer.length > contract.MC_MAX_LINE_BYTES) {
          this._replies.push(contract.MC_REPLY_LINE_TOO_LONG);
          this._finish();
        } else {
          this._send();
        }
        return;
      }
      this._buffer = taken.used === this._buffer.length ? null : this._buffer.subarray(taken.used);
      const command = memcache.parseCommand(taken.line);
      if (command.verb === 'get') {
        this._state.requests += 1;
        this._busy = true;
        this._pool.get(command.key, (error, value) => {
          this._busy = false;
          this._replies.push(
            error ? contract.MC_REPLY_UNAVAILABLE : memcache.encodeGetReply(command.key, value),
          );
          this._pump();
        });
        return;
      }
      if (command.verb === 'quit') {
        this._finish();
        return;
      }
      this._replies.push(command.reply);
    }
  }

  _send() {
    const replies = this._replies;
    if (replies.length === 0) return;
    this._replies = [];
    this._socket.write(replies.length === 1 ? replies[0] : Buffer.concat(replies));
  }

  /** Send what is pending, then close (quit, or a line too long). */
  _finish() {
    this._send();
    this._ended = true;
    this._socket.end();
  }
}

class MemcachedSocketService {
  constructor(pool, state) {
    this._pool = pool;
    this._state = state;
    this._connections = new Set();
    this.server = net.createServer((socket) => {
      new SocketServiceConnection(socket, this._pool, this._state, this._connections); // eslint-disable-line no-new
    });
  }

  /** Stop accepting and end every connection (its get under way fails with the pool). */
  close() {
    this.server.close();
    for (const socket of this._connections) socket.end();
  }

  /** Shutdown's last resort: drop what is still open. */
  destroy() {
    for (const socket of this._connections) socket.destroy();
  }
}

module.exports = { MemcachedSocketService };
