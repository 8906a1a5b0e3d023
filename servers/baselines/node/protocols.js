'use strict';
// The HTTP server for each protocol (docs/contract.md, "Protocols"): only the listener
// changes, the request listener and its handlers are the same over every one.
//
//   h1      http.createServer                     cleartext HTTP/1.1
//   h1-tls  https.createServer                    TLS 1.3, ALPN http/1.1 only
//   h2      http2.createSecureServer              TLS 1.3, ALPN h2 only (allowHTTP1: false)
//   h2c     http2.createServer                    HTTP/2 with prior knowledge
//
// HTTP/2 requests reach the listener through Node's compatibility API (Http2ServerRequest
// and Http2ServerResponse), which node-http's handlers use as they are; Express 4 replaces
// a request's prototype with http.IncomingMessage's and fails on them, so node-express
// speaks h1 and h1-tls only (servers/__init__.py, protocol_notes).

const fs = require('node:fs');
const http = require('node:http');
const http2 = require('node:http2');
const https = require('node:https');
const tls = require('node:tls');

const contract = require('./contract');

const HTTP2_PROTOCOLS = Object.freeze([contract.PROTOCOL_H2, contract.PROTOCOL_H2C]);
// What each variant serves; options.js refuses the rest with the reason.
const VARIANT_PROTOCOLS = Object.freeze({
  'node-http': contract.PROTOCOLS,
  'node-express': Object.freeze([contract.PROTOCOL_H1, contract.PROTOCOL_H1_TLS]),
});

/** Whether `protocol` is HTTP/2 (its connections are sessions of streams, not requests). */
function isHttp2(protocol) {
  return HTTP2_PROTOCOLS.includes(protocol);
}

/**
 * The TLS options every TLS listener shares: the harness's certificate, TLS 1.3 only, and
 * ALPN limited to the case's protocol, so a client cannot quietly fall back to another.
 * A TLS handshake gets the head deadline of its own (`handshakeTimeout`). Throws an Error
 * naming the files when they do not read, parse or match (here once, not per handshake).
 */
function tlsOptions(options) {
  const names = `--tls-cert ${options.tlsCert} with --tls-key ${options.tlsKey}`;
  let secure;
  try {
    secure = {
      cert: fs.readFileSync(options.tlsCert),
      key: fs.readFileSync(options.tlsKey),
      minVersion: contract.TLS_MINIMUM_VERSION,
      ALPNProtocols: [contract.ALPN_FOR_PROTOCOL[options.protocol]],
      handshakeTimeout: Math.ceil(options.headTimeoutMs),
    };
    tls.createSecureContext(secure);
  } catch (error) {
    throw new Error(`${names}: ${error.message}`);
  }
  return secure;
}

/**
 * The server speaking `options.protocol`, with `listener` for its requests. `httpOptions`
 * are http.createServer's (HTTP/1.1 only); HTTP/2 servers close a session idle for the
 * head timeout (Node's session timeout: an idle timer, not the HTTP/1.1 deadlines).
 * Throws an Error naming the files when a certificate or key does not load (tlsOptions).
 */
function createServer(options, httpOptions, listener) {
  switch (options.protocol) {
    case contract.PROTOCOL_H1:
      return http.createServer(httpOptions, listener);
    case contract.PROTOCOL_H1_TLS:
      return https.createServer({ ...httpOptions, ...tlsOptions(options) }, listener);
    case contract.PROTOCOL_H2:
      return http2
        .createSecureServer({ ...tlsOptions(options), allowHTTP1: false }, listener)
        .setTimeout(Math.ceil(options.headTimeoutMs));
    case contract.PROTOCOL_H2C:
      return http2.createServer({}, listener).setTimeout(Math.ceil(options.headTimeoutMs));
    default:
      throw new Error(`protocol ${options.protocol} is not one of ${contract.PROTOCOLS.join(', ')}`);
  }
}

module.exports = { createServer, isHttp2, VARIANT_PROTOCOLS };
