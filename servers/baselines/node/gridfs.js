'use strict';
// `/gridfs/{name}`: files from GridFS read by `_id` only (servers/core/gridfs_layout.py says
// why: FerretDB pushes down nothing but `_id` equality). `fs.files` by `_id` = name, then
// every chunk by `_id` = "<name>#<n>", concurrently, through the process's shared client.

const contract = require('./contract');
const { contentType, validName } = require('./static');

class BackendUnavailable extends Error {}

/** The `_id`s of every chunk of a file of `lengthBytes` (gridfs_layout.chunk_ids). */
function chunkIds(name, lengthBytes, chunkBytes) {
  const count = lengthBytes ? Math.max(1, Math.ceil(lengthBytes / chunkBytes)) : 0;
  return Array.from({ length: count }, (_, n) => `${name}#${n}`);
}

/** A BSON Binary's bytes as a Buffer, without a copy. */
function binaryBytes(binary) {
  const bytes = binary.buffer.subarray(0, binary.position);
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

class GridFS {
  /** @param {import('./mongo').LazyMongo} mongo the process's shared client */
  constructor(mongo, state) {
    this._mongo = mongo;
    this._state = state;
    this._files = null;
    this._chunks = null;
  }

  /**
   * {body, contentType} of the file `name`, null when there is none (or the name is not
   * valid: no database call then). Rejects with BackendUnavailable, counted in
   * backend_errors, when the database fails or the file is malformed.
   */
  async read(name) {
    if (!validName(name)) return null;
    if (this._files === null) {
      const database = this._mongo.db();
      this._files = database.collection(contract.GRIDFS_FILES_COLLECTION);
      this._chunks = database.collection(contract.GRIDFS_CHUNKS_COLLECTION);
    }
    let document;
    let body;
    try {
      document = await this._files.findOne({ _id: name });
      if (document === null) return null;
      const ids = chunkIds(name, document.length, document.chunkSize);
      const chunks = await Promise.all(
        ids.map((id) => this._chunks.findOne({ _id: id }, { projection: { data: 1 } })),
      );
      const parts = chunks.map((chunk, n) => {
        if (chunk === null) throw new Error(`no chunk ${ids[n]}`);
        return binaryBytes(chunk.data);
      });
      body = parts.length === 1 ? parts[0] : Buffer.concat(parts);
    } catch (error) {
      this._state.backendErrors += 1;
      throw new BackendUnavailable(`gridfs: ${name}: ${error.message}`);
    }
    const type = (document.metadata && document.metadata.contentType) || contentType(name);
    return { body, contentType: type };
  }
}

module.exports = { GridFS, BackendUnavailable, chunkIds };
