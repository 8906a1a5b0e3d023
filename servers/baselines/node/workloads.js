'use strict';
// The boards' workloads (docs/contract.md, "The boards' workloads"), shared by both
// variants: JSON serialized per request, plaintext, a wait on Node's own timer, an upload
// counted as it streams in, a gzip-encoded document, a 10 KB body.
//
// The payloads are servers/contract.py's, given by `python -m servers` in the environment
// variable SERVERBENCH_WORKLOADS (contract.WORKLOADS_ENV, JSON of contract.workload_values):
// written once there, never copied here. verify checks what this server answers with them.

const zlib = require('node:zlib');

const contract = require('./contract');

/** The workloads' values (contract.workload_values), or an Error naming what is missing. */
function workloadValues() {
  const raw = process.env[contract.WORKLOADS_ENV];
  if (!raw) throw new Error(`${contract.WORKLOADS_ENV} is not set: start this server with python -m servers`);
  return JSON.parse(raw);
}

/** `/delay/{ms}`'s milliseconds: 1 to 5 digits naming at most the bound, else null (400). */
function delayMs(segment, maxMs) {
  if (!/^[0-9]{1,5}$/.test(segment)) return null;
  const value = Number(segment);
  return value <= maxMs ? value : null;
}

/** Whether an Accept-Encoding value names gzip with a non-zero weight. */
function wantsGzip(acceptEncoding) {
  for (const coding of (acceptEncoding || '').toLowerCase().split(',')) {
    const [name, ...params] = coding.split(';');
    if (name.trim() !== 'gzip' && name.trim() !== 'x-gzip') continue;
    const weight = params.join(';').replace(/\s/g, '').replace(/^q=/, '');
    return params.length === 0 || Number(weight) > 0;
  }
  return false;
}

/**
 * The workload handlers, over the shared handlers' reply helpers (handlers.js).
 * @param {{state, reply, tooLarge, plain, serverHeader: string}} helpers
 */
function makeWorkloadHandlers({ state, reply, tooLarge, plain, serverHeader }) {
  const values = workloadValues();
  const plaintextBody = Buffer.from(values.plaintext_body);
  const body10k = Buffer.from(values.body_10k);
  const jsonCompBody = Buffer.from(JSON.stringify(values.json_comp_document));

  return {
    json(req, res) {
      state.requests += 1;
      reply(res, 200, contract.JSON_CONTENT_TYPE, Buffer.from(JSON.stringify(values.json_message)));
    },

    plaintext(req, res) {
      state.requests += 1;
      reply(res, 200, contract.TEXT_CONTENT_TYPE, plaintextBody);
    },

    body10k(req, res) {
      state.requests += 1;
      reply(res, 200, contract.TEXT_CONTENT_TYPE, body10k);
    },

    jsonComp(req, res) {
      state.requests += 1;
      const gzipped = wantsGzip(req.headers['accept-encoding']);
      const body = gzipped ? zlib.gzipSync(jsonCompBody, { level: values.gzip_level }) : jsonCompBody;
      res.writeHead(200, {
        'Content-Type': contract.JSON_CONTENT_TYPE,
        'Content-Length': body.length,
        Vary: 'Accept-Encoding',
        ...(gzipped ? { 'Content-Encoding': 'gzip' } : {}),
        Server: serverHeader,
      });
      res.end(body);
    },

    /** `segment` is the path after /delay/; the wait is dropped if the client leaves. */
    delay(req, res, segment) {
      state.requests += 1;
      const ms = delayMs(segment, values.delay_max_ms);
      if (ms === null) {
        plain(res, 400, '400: Bad Request');
        return;
      }
      const timer = setTimeout(() => reply(res, 200, contract.TEXT_CONTENT_TYPE, Buffer.from(`${ms}`)), ms);
      res.on('close', () => clearTimeout(timer));
    },

    /** The body counted as it streams in and dropped; over the limit 413, then closed. */
    upload(req, res) {
      state.requests += 1;
      const maxBytes = values.upload_max_body_bytes;
      if (Number(req.headers['content-length'] || 0) > maxBytes) {
        tooLarge(req, res);
        return;
      }
      let bodyBytes = 0;
      let refused = false;
      req.on('data', (chunk) => {
        if (refused) return;
        bodyBytes += chunk.length;
        if (bodyBytes > maxBytes) {
          refused = true;
          tooLarge(req, res);
        }
      });
      req.on('end', () => {
        if (!refused) reply(res, 200, contract.TEXT_CONTENT_TYPE, Buffer.from(`${bodyBytes}`));
      });
    },
  };
}

module.exports = { makeWorkloadHandlers, delayMs, wantsGzip };
