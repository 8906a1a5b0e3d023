'use strict';
// `/ws` on the `ws` package, for both variants: the HTTP server's 'upgrade' event comes
// here before any routing layer (Express never sees upgrades).
//
// Handshake: Origin must be contract.WS_ORIGIN (else 403) and the client must offer
// contract.WS_SUBPROTOCOL (else 400). Messages: a text message that is a JSON object is
// stored in the sink; other text closes 1007, binary 1003, over 1 MiB 1009 (ws's own
// maxPayload check). Shutdown closes every session with 1001.

const http = require('node:http');

const { WebSocketServer } = require('ws');

const contract = require('./contract');

/** The HTTP status refusing a `/ws` handshake, or 0 when it may proceed (common.py's rule). */
function handshakeStatus(origin, offeredProtocols) {
  if (origin !== contract.WS_ORIGIN) return contract.WS_BAD_ORIGIN_STATUS;
  const offered = (offeredProtocols || '').split(',').map((protocol) => protocol.trim());
  if (!offered.includes(contract.WS_SUBPROTOCOL)) return contract.WS_NO_SUBPROTOCOL_STATUS;
  return 0;
}

/** The close code a text message earns, or 0 when it is a JSON object (common.py's rule). */
function textCloseCode(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return contract.WS_CLOSE_INVALID_PAYLOAD;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return contract.WS_CLOSE_INVALID_PAYLOAD;
  }
  return 0;
}

class WebSockets {
  /**
   * Take over `server`'s upgrades.
   * @param {import('node:http').Server} server
   * @param {{state, sink, serverHeader: string}} backends
   */
  constructor(server, { state, sink, serverHeader }) {
    this._state = state;
    this._sink = sink;
    this._serverHeader = serverHeader;
    this._server = new WebSocketServer({
      noServer: true,
      maxPayload: contract.WS_MAX_MESSAGE_BYTES,
      perMessageDeflate: false,
      handleProtocols: () => contract.WS_SUBPROTOCOL, // offered: checked before the upgrade
    });
    this._server.on('headers', (headers) => {
      headers.push(`Server: ${serverHeader}`, `Date: ${new Date().toUTCString()}`);
    });
    server.on('upgrade', (req, socket, head) => this._upgrade(req, socket, head));
  }

  _upgrade(req, socket, head) {
    const query = req.url.indexOf('?');
    const path = query < 0 ? req.url : req.url.slice(0, query);
    if (path !== contract.ROUTE_WEBSOCKET || req.method !== 'GET') {
      this._refuse(socket, path === contract.ROUTE_WEBSOCKET ? 405 : 404);
      return;
    }
    this._state.requests += 1;
    const refusal = handshakeStatus(req.headers.origin, req.headers['sec-websocket-protocol']);
    if (refusal) {
      this._refuse(socket, refusal);
      return;
    }
    this._server.handleUpgrade(req, socket, head, (ws) => this._session(ws));
  }

  /** Answer a refused upgrade with a plain reply and close (no routing layer is involved). */
  _refuse(socket, status) {
    socket.on('error', () => {});
    const body = `${status}`;
    socket.end(
      `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\n` +
        `Content-Type: ${contract.TEXT_CONTENT_TYPE}\r\nContent-Length: ${body.length}\r\n` +
        `Date: ${new Date().toUTCString()}\r\nServer: ${this._serverHeader}\r\n` +
        `Connection: close\r\n\r\n${body}`,
    );
  }

  _session(ws) {
    const state = this._state;
    const sink = this._sink;
    ws.on('message', (data, isBinary) => {
      if (ws.readyState !== ws.OPEN) return; // closing already: ignore what follows
      const text = isBinary ? null : data.toString('utf8');
      const code = isBinary ? contract.WS_CLOSE_UNSUPPORTED_DATA : textCloseCode(text);
      if (code) {
        state.bad += 1;
        ws.close(code);
        return;
      }
      state.messages += 1;
      const taken = sink.store(
        state.makeRecord(contract.WEBSOCKET_RECORD_METHOD, contract.ROUTE_WEBSOCKET, {}, text),
      );
      if (!taken) ws.close(contract.WS_CLOSE_TRY_AGAIN_LATER); // queue full: in sink_errors
    });
    // ws closed it already with the right code (1009 over maxPayload, 1007 bad UTF-8, 1002)
    ws.on('error', () => {
      state.bad += 1;
    });
  }

  /** Shutdown: close every session with 1001 (they end when the client answers). */
  closeAll() {
    for (const ws of this._server.clients) ws.close(contract.WS_CLOSE_GOING_AWAY, 'server shutdown');
  }

  /** Shutdown's last resort: drop the sessions that did not answer. */
  terminateAll() {
    for (const ws of this._server.clients) ws.terminate();
  }
}

module.exports = { WebSockets, handshakeStatus, textCloseCode };
