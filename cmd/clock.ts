/**
 * `punctual clock get|advance`: GET /v1/clock, and POST /v1/clock:advance on a node started with
 * `serve --clock manual` (docs/api.md "The clock"). An advance prints where the clock is once every occurrence up
 * to it fired.
 */
import type { Command } from 'commander';
import { clockLimits } from '../src/core/limits.js';
import { withClient, type ClientOptions } from './client.js';
import { printOne, withClientOptions } from './common.js';
import { usageError, type CliIo } from './io.js';
import { parseIntIn, parseTime } from './parse.js';

export function registerClockCommands(program: Command, io: CliIo): void {
  const clock = program.command('clock').description("the node's scheduler clock (advance: a node started with --clock manual)");
  withClientOptions(clock.command('get').description('the clock mode (system or manual) and its now')).action(async (opts: ClientOptions) => {
    await withClient(opts, io, async (client) => printOne(client, io, (await client.call('GET', '/v1/clock')).body));
  });
  withClientOptions(
    clock
      .command('advance')
      .option('--by-ms <ms>', `move the clock forward by this many ms (1..${clockLimits.advanceByMsMax})`)
      .option('--to <time>', 'move the clock to this time (RFC 3339 or epoch ms), not before its now')
      .description('move a manual clock; answers once everything due up to the new time fired'),
  ).action(async (opts: ClientOptions & { byMs?: string; to?: string }) => {
    if ((opts.byMs === undefined) === (opts.to === undefined)) throw usageError('clock advance: give exactly one of --by-ms or --to');
    const body =
      opts.byMs !== undefined
        ? { by_ms: parseIntIn('--by-ms', opts.byMs, 1, clockLimits.advanceByMsMax) }
        : { to: parseTime('--to', opts.to!) };
    await withClient(opts, io, async (client) => printOne(client, io, (await client.call('POST', '/v1/clock:advance', { body })).body));
  });
}
