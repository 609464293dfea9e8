/**
 * Admin routes of node operations that are not part of the scheduling API: `GET /v1/admin/backup` streams a
 * consistent online copy of the node's SQLite file (docs/api.md "Backup"). The node offers it through the
 * optional `BackupApi` capability of its SchedulerApi; without it the route answers 503.
 */
import type { Readable } from 'node:stream';
import { PunctualError, invalid } from '../core/errors.js';
import type { ApiResponse } from './app.js';
import { noQuery } from './parse-job.js';
import type { Operation, Route, RouteContext } from './routes.js';

/** A finished copy to stream; the node removes its temporary file once the stream closes. */
export interface BackupDownload {
  bytes: number;
  stream: Readable;
  fileName: string;
}

/** Optional node capability behind GET /v1/admin/backup. */
export interface BackupApi {
  /** Copies the database online; `conflict` while another backup of this node runs. */
  backup(): Promise<BackupDownload>;
}

export const backupContentType = 'application/vnd.sqlite3';

async function backup({ deps, query }: RouteContext): Promise<ApiResponse> {
  const unknown = [...query.keys()][0];
  if (unknown !== undefined) throw invalid(unknown, 'unknown query parameter');
  const api = deps.api as Partial<BackupApi>;
  if (typeof api.backup !== 'function') throw new PunctualError('unavailable', 'this node cannot take backups');
  const copy = await api.backup();
  return {
    status: 200,
    headers: {
      'content-type': backupContentType,
      'content-length': String(copy.bytes),
      'content-disposition': `attachment; filename="${copy.fileName}"`,
      'cache-control': 'no-store',
    },
    body: copy.stream,
  };
}

type Op = (method: string, path: string, doc: Operation, handler: Route['handler'], scope: Route['scope']) => Route;

export function adminRoutes(op: Op): Route[] {
  const doc: Operation = {
    tag: 'Operations',
    summary: 'A consistent online copy of this node\'s database (SQLite), streamed',
    description: 'Waits until this node has applied every write acknowledged before the request, then copies the database page by page while the node keeps firing. One backup at a time per node (409 while another runs). The file holds every task\'s signing secrets: keep it as a secret. Needs the admin scope.',
    query: noQuery,
    answers: { 200: { description: 'The SQLite file (Content-Length and Content-Disposition set).', contentType: backupContentType } },
    errors: [409, 503],
  };
  return [op('GET', '/v1/admin/backup', doc, backup, 'admin')];
}
