'use strict';
// What each route does, shared by both variants: node-http's one request handler and
// node-express's routes only decide which of these runs (routes_http.js, routes_express.js).
//
// Every reply goes through `reply`: status, Content-Type, Content-Length and Server set in
// one writeHead (Node adds Date itself), the same bytes under either variant.

const contract = require('./contract');
const { validKey } = require('./memcache');
const { handshakeStatus } = require('./websocket');

const TOO_LARGE_BODY = Buffer.from('413: Request Entity Too Large');
const BAD_FRAMING_BODY = Buffer.from('400: Bad Request');

/** The record's headers as sent (names in their own case); repeated ones joined by ", ". */
function headersAsSent(rawHeaders) {
  const headers = {};
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i];
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

  return {
    reply,
    notFound,

    /** 400, then close: nothing more on this connection can be trusted. */
    badFraming(req, res) {
      res.writeHead(400, {
        'Content-Type': contract.TEXT_CONTENT_TYPE,
        'Content-Length': BAD_FRAMING_BODY.length,
        Connection: 'close',
        Server: serverHeader,
      });
      res.end(BAD_FRAMING_BODY, () => req.socket.destroy());
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
      // a chunked body arrives: 413, and the connection closes after it.
      const tooLarge = () => {
        res.writeHead(413, {
          'Content-Type': contract.TEXT_CONTENT_TYPE,
          'Content-Length': TOO_LARGE_BODY.length,
          Connection: 'close',
          Server: serverHeader,
        });
        res.end(TOO_LARGE_BODY);
      };
      if (Number(req.headers['content-length'] || 0) > contract.LOG_MAX_BODY_BYTES) {
        tooLarge();
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
          tooLarge();
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
