'use strict';
// `/gridfs/{name}`: files from GridFS read the standard way with the driver's GridFSBucket
// (servers/core/gridfs_layout.py): the newest `fs.files` document with that filename, then
// its chunks by `files_id` sorted by `n`, through the process's shared client.

const contract = require('./contract');
const { contentType, validName } = require('./static');

class BackendUnavailable extends Error {}

/** The bucket's download stream of `name`, collected: {body, file} (file: the fs.files
 * document, null for an empty file), null when there is no such file. */
function download(bucket, name) {
  return new Promise((resolve, reject) => {
    const parts = [];
    let file = null;
    const stream = bucket.openDownloadStreamByName(name);
    stream.on('file', (document) => {
      file = document;
    });
    stream.on('data', (part) => parts.push(part));
    stream.on('error', (error) => (error.code === 'ENOENT' ? resolve(null) : reject(error)));
    stream.on('end', () => {
      const body = parts.length === 1 ? parts[0] : Buffer.concat(parts);
      // The driver checks each chunk's n and size, not that the last one arrived.
      if (file !== null && body.length !== file.length) {
        reject(new Error(`file ${name} has ${body.length} of ${file.length} bytes`));
      } else {
        resolve({ body, file });
      }
    });
  });
}

class GridFS {
  /** @param {import('./mongo').LazyMongo} mongo the process's shared client */
  constructor(mongo, state) {
    this._mongo = mongo;
    this._state = state;
    this._bucket = null;
  }

  /**
   * {body, contentType} of the file `name`, null when there is none (or the name is not
   * valid: no database call then). Rejects with BackendUnavailable, counted in
   * backend_errors, when the database fails or the file is corrupt.
   */
  async read(name) {
    if (!validName(name)) return null;
    let found;
    try {
      if (this._bucket === null) {
        const { GridFSBucket } = require('mongodb'); // loaded only by servers that use it
        this._bucket = new GridFSBucket(this._mongo.db(), { bucketName: contract.GRIDFS_BUCKET });
      }
      found = await download(this._bucket, name);
    } catch (error) {
      this._state.backendErrors += 1;
      throw new BackendUnavailable(`gridfs: ${name}: ${error.message}`);
    }
    if (found === null) return null;
    const metadata = found.file === null ? null : found.file.metadata;
    const type = (metadata && metadata.contentType) || contentType(name);
    return { body: found.body, contentType: type };
  }
}

module.exports = { GridFS, BackendUnavailable };
