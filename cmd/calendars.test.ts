/** `punctual calendar put|get|list|delete` against a real node (in-process, SQLite in a temp dir, real HTTP). */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../src/core/log.js';
import { startNode, type NodeHandle } from '../src/node/node.js';
import { nodeConfig } from '../src/node/testing/fixtures.js';
import { runCli } from './cli-fixture.js';

let dir: string;
let node: NodeHandle;
let server: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-cli-calendars-'));
  node = await startNode(nodeConfig(join(dir, 'data')), { logger: silentLogger });
  server = `http://127.0.0.1:${node.apiPort}`;
});

afterAll(async () => {
  await node.close();
  rmSync(dir, { recursive: true, force: true });
});

const cli = (argv: string[]) => runCli([...argv, '--server', server]);

describe('calendar put|get|list|delete', () => {
  it('put from flags, get, list, delete', async () => {
    const put = await cli([
      'calendar', 'put', 'holidays-de', '--timezone', 'Europe/Berlin', '--date', '2027-12-26', '--date', '2027-12-25',
      '--range', '2027-12-28..2027-12-31', '--description', 'Christmas', '--json',
    ]); // prettier-ignore
    expect(put.code).toBe(0);
    expect(JSON.parse(put.stdout)).toMatchObject({
      name: 'holidays-de', timezone: 'Europe/Berlin', dates: ['2027-12-25', '2027-12-26'],
      ranges: [{ from: '2027-12-28', to: '2027-12-31' }], description: 'Christmas',
    }); // prettier-ignore
    expect((await cli(['calendar', 'get', 'holidays-de'])).stdout).toContain('timezone:');
    expect((await cli(['calendar', 'list'])).stdout).toBe(
      'NAME         TIMEZONE       DATES  RANGES  DESCRIPTION\n' + 'holidays-de  Europe/Berlin  2      1       Christmas\n',
    );
    expect(await cli(['calendar', 'delete', 'holidays-de'])).toEqual({ stdout: 'deleted calendar holidays-de\n', stderr: '', code: 0 });
    expect((await cli(['calendar', 'get', 'holidays-de'])).code).not.toBe(0);
  });

  it('job add --exclude names calendars in the schedule; without a recurring schedule it is bad usage', async () => {
    expect((await cli(['calendar', 'put', 'off', '--date', '2030-01-01'])).code).toBe(0);
    const r = await cli(['job', 'add', '--url', 'http://127.0.0.1:9/hook', '--every-ms', '60000', '--exclude', 'off', '--json']);
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout).schedule.exclude).toEqual(['off']);
    const unknown = await cli(['job', 'add', '--url', 'http://127.0.0.1:9/hook', '--cron', '0 9 * * *', '--exclude', 'nope']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('calendar "nope" not found');
    expect((await cli(['job', 'add', '--url', 'http://127.0.0.1:9/hook', '--delay-ms', '10', '--exclude', 'off'])).code).toBe(2);
  });

  it('put --file sends the file as is; bad flags are bad usage; the server names a bad date', async () => {
    const f = join(dir, 'cal.json');
    writeFileSync(f, JSON.stringify({ dates: ['2028-01-01'] }));
    expect((await cli(['calendar', 'put', 'ny', '--file', f])).code).toBe(0);
    expect((await cli(['calendar', 'put', 'ny', '--file', f, '--date', '2028-01-02'])).stderr).toBe('punctual: --file and --date are mutually exclusive\n');
    expect((await cli(['calendar', 'put', 'ny'])).code).toBe(2);
    expect((await cli(['calendar', 'put', 'ny', '--range', '2028-01-01'])).code).toBe(2);
    expect((await cli(['calendar', 'put', 'bad name', '--date', '2028-01-01'])).code).toBe(2);
    const bad = await cli(['calendar', 'put', 'ny', '--date', '2027-02-29']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('dates[0]');
  });
});
