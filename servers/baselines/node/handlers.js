'use strict';
// What each route does, shared by both variants: node-http's one request handler and
// node-express's routes only decide which of these runs (routes_http.js, routes_express.js).
//
// Every reply goes through `reply`: status, Content-Type, Content-Length and Server set in
// one writeHead (Node adds Date itself), the same bytes under either variant.

const { constants: http2Constants } = require('node:http2');

const contract = require('./contract');
const { validKey } = require('./memcache');
const { handshakeStatus } = require('./websocket');
const { makeWorkloadHandlers } = require('./workloads');

const TOO_LARGE_BODY = Buffer.from('413: Request Entity Too Large');
const BAD_FRAMING_BODY = Buffer.from('400: Bad Request');

/**
 * The record's headers as sent (names in their own case); repeated ones joined by ", ".
 * HTTP/2's pseudo-headers (`:method`, `:path`, ...) are the request line's, not headers.
 */
function headersAsSent(rawHeaders) {
  const headers = {};
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i];
    if (name.startsWith(':')) continue;
    headers[name] = Object.hasOwn(headers, name) ? `${headers[name]}, ${rawHeaders[i + 1]}` : rawHeaders[i + 1];
  }
  return headers;
}

/**
 * The route handlers over one process's backends.
 * @param {{state, sink, files, gridfs, pool, serverHeader: string}} backends
 */
function makeHandlers({ state, sink, files, gridfs, pool, serverHeader }) {
  function reply(res, status, contentType, body) {
    res.writeHead(status, {
      'Content-Type': contentType,
      'Content-Length': body.length,
      Server: serverHeader,
    });
    res.end(body);
  }

  function plain(res, status, text) {
    reply(res, status, contract.TEXT_CONTENT_TYPE, Buffer.from(text));
  }

  function notFound(req, res) {
    reply(res, 404, contract.TEXT_CONTENT_TYPE, contract.NOT_FOUND_BODY);
  }

  function unavailable(res, body) {
    reply(res, contract.UNAVAILABLE_STATUS, contract.TEXT_CONTENT_TYPE, body);
  }

  /**
   * A reply after which nothing more of the request is read. HTTP/1.1 closes the
   * connection (Connection: close; `destroy`: drop the socket at once once it is sent).
   * HTTP/2 has no Connection header and other streams share the connection: the stream is
   * reset with NO_ERROR once the whole response is sent, which asks the client to stop
   * sending its body (RFC 9113, section 8.1). Node queues the response's last frame when
   * the stream asks for trailers and writes it in that turn of the event loop; a reset
   * queued before then would overtake it (nghttp2 sends RST_STREAM ahead of DATA).
   */
  function replyAndStop(req, res, status, body, destroy = false) {
    const http2 = req.httpVersionMajor === 2;
    res.writeHead(status, {
      'Content-Type': contract.TEXT_CONTENT_TYPE,
      'Content-Length': body.length,
      ...(http2 ? {} : { Connection: 'close' }),
      Server: serverHeader,
    });
    if (http2) {
      const stream = req.stream;
      stream.once('wantTrailers', () =>
        setImmediate(() => stream.close(http2Constants.NGHTTP2_NO_ERROR)),
      );
      res.end(body);
    } else {
      res.end(body, () => destroy && req.socket.destroy());
    }
  }

  const tooLarge = (req, res) => replyAndStop(req, res, 413, TOO_LARGE_BODY);
  return {
    ...makeWorkloadHandlers({ state, reply, tooLarge, plain, serverHeader }),
    reply,
    notFound,

    /** 400, then close: nothing more on this connection can be trusted. */
    badFraming(req, res) {
      replyAndStop(req, res, 400, BAD_FRAMING_BODY, true);
    },

    methodNotAllowed(req, res) {
      plain(res, 405, 'method not allowed');
    },

    text(req, res) {
      state.requests += 1;
      reply(res, 200, contract.TEXT_CONTENT_TYPE, contract.TEXT_BODY);
    },

    counter(req, res) {
      state.requests += 1;
      reply(res, 200, contract.JSON_CONTENT_TYPE, state.counterPayload());
    },

    /** Any method: the record is stored first (file: handed to the OS; mongo: acknowledged). */
    log(req, res, path) {
      state.requests += 1;
      // The contract's limit, before reading any of the body when it is declared, else as
      // a chunked body arrives: 413, and the connection (HTTP/2: the stream) closes after it.
      if (Number(req.headers['content-length'] || 0) > contract.LOG_MAX_BODY_BYTES) {
        tooLarge(req, res);
        return;
      }
      const chunks = [];
      let bodyBytes = 0;
      let refused = false;
      req.on('data', (chunk) => {
        if (refused) return;
        bodyBytes += chunk.length;
        if (bodyBytes > contract.LOG_MAX_BODY_BYTES) {
          refused = true;
          chunks.length = 0;
          tooLarge(req, res);
          return;
        }
        chunks.push(chunk);
      });
      req.on('end', () => {
        if (refused) return;
        const body = (chunks.length === 1 ? chunks[0] : Buffer.concat(chunks)).toString('utf8');
        const record = state.makeRecord(req.method, path, headersAsSent(req.rawHeaders), body);
        sink.storeAndWait(record).then(
          () => reply(res, 200, contract.TEXT_CONTENT_TYPE, contract.LOG_REPLY_BODY),
          () => unavailable(res, contract.SINK_UNAVAILABLE_BODY),
        );
      });
    },

    /** `name` is the decoded path segment (null: it did not decode). */
    files(req, res, name) {
      state.requests += 1;
      if (name === null) {
        notFound(req, res);
        return;
      }
      files.read(name, (file) => {
        if (file === null) notFound(req, res);
        else reply(res, 200, file.contentType, file.body);
      });
    },

    gridfs(req, res, name) {
      state.requests += 1;
      if (name === null) {
        notFound(req, res);
        return;
      }
      gridfs.read(name).then(
        (file) => (file === null ? notFound(req, res) : reply(res, 200, file.contentType, file.body)),
        () => unavailable(res, contract.BACKEND_UNAVAILABLE_BODY), // counted in backend_errors by gridfs
      );
    },

    mc(req, res, key) {
      state.requests += 1;
      if (key === null || !validKey(key)) {
        notFound(req, res);
        return;
      }
      pool.get(key, (error, value) => {
        if (error) unavailable(res, contract.BACKEND_UNAVAILABLE_BODY); // counted in backend_errors by the pool
        else if (value === null) notFound(req, res);
        else reply(res, 200, contract.MC_CONTENT_TYPE, value);
      });
    },

    /** GET /ws without an Upgrade: refused as a handshake would be, else 400. */
    websocketWithoutUpgrade(req, res) {
      state.requests += 1;
      const refusal = handshakeStatus(req.headers.origin, req.headers['sec-websocket-protocol']);
      plain(res, refusal || 400, refusal ? `${refusal}` : '400: not a WebSocket handshake');
    },
  };
}

module.exports = { makeHandlers };
