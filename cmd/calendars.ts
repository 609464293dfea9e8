/** `punctual calendar put|get|list|delete`: the exclusion calendars of docs/api.md (Calendars). */
import type { Command } from 'commander';
import { taskNamePattern } from '../src/core/ids.js';
import { seg, withClient, type ClientOptions } from './client.js';
import { collect, printJson, printOne, withClientOptions } from './common.js';
import { cell, isPlainObject, renderTable } from './format.js';
import { usageError, type CliIo } from './io.js';
import { parseJsonObject, readTextFile } from './parse.js';

export interface CalendarPutOptions extends ClientOptions {
  file?: string;
  timezone?: string;
  date?: string[];
  range?: string[];
  description?: string;
}

function calendarName(name: string): string {
  if (!taskNamePattern.test(name)) throw usageError(`calendar name must match [A-Za-z0-9._-]{1,128}, got ${JSON.stringify(name)}`);
  return name;
}

const datePattern = /^\d{4}-\d{2}-\d{2}$/;

function date(what: string, text: string): string {
  if (!datePattern.test(text)) throw usageError(`${what}: expected a date YYYY-MM-DD, got ${JSON.stringify(text)}`);
  return text;
}

/** `FROM..TO`, both dates, inclusive. */
function range(text: string): { from: string; to: string } {
  const parts = text.split('..');
  if (parts.length !== 2) throw usageError(`--range: expected FROM..TO (dates YYYY-MM-DD), got ${JSON.stringify(text)}`);
  return { from: date('--range', parts[0]!), to: date('--range', parts[1]!) };
}

/** The PUT /v1/calendars/{name} body: the JSON of --file as is, or the flags (the server checks the dates). */
export function buildCalendarBody(opts: CalendarPutOptions): Record<string, unknown> {
  const flagNames = Object.entries({
    '--timezone': opts.timezone, '--date': opts.date, '--range': opts.range, '--description': opts.description,
  }).filter(([, v]) => v !== undefined).map(([k]) => k); // prettier-ignore
  if (opts.file !== undefined) {
    if (flagNames.length > 0) throw usageError(`--file and ${flagNames.join(', ')} are mutually exclusive`);
    return parseJsonObject('--file', readTextFile('--file', opts.file));
  }
  if (opts.date === undefined && opts.range === undefined) {
    throw usageError('calendar put: give --date and/or --range (or --file F with the JSON body)');
  }
  const body: Record<string, unknown> = {};
  if (opts.timezone !== undefined) body.timezone = opts.timezone;
  body.dates = (opts.date ?? []).map((d) => date('--date', d));
  body.ranges = (opts.range ?? []).map(range);
  if (opts.description !== undefined) body.description = opts.description;
  return body;
}

export function calendarsTable(calendars: readonly Record<string, unknown>[]): string {
  const headers = ['NAME', 'TIMEZONE', 'DATES', 'RANGES', 'DESCRIPTION'];
  const rows = calendars.map((c) => [
    cell(c.name),
    cell(c.timezone),
    cell(Array.isArray(c.dates) ? c.dates.length : null),
    cell(Array.isArray(c.ranges) ? c.ranges.length : null),
    cell(c.description),
  ]);
  return renderTable(headers, rows);
}

function addCalendarPut(calendar: Command, io: CliIo): void {
  withClientOptions(calendar.command('put').argument('<name>', 'calendar name').description('create or replace an exclusion calendar'))
    .option('--file <file>', 'the whole calendar as a JSON file (the calendar body of docs/api.md) instead of the flags')
    .option('--timezone <zone>', 'IANA zone the dates are local dates of (default UTC)')
    .option('--date <YYYY-MM-DD>', 'an excluded date (repeatable)', collect)
    .option('--range <FROM..TO>', 'excluded dates FROM to TO, both included (repeatable)', collect)
    .option('--description <text>', 'what the calendar is for')
    .action(async (name: string, opts: CalendarPutOptions) => {
      const body = buildCalendarBody(opts);
      await withClient(opts, io, async (client) => {
        const res = await client.call('PUT', `/v1/calendars/${seg(calendarName(name))}`, { body });
        printOne(client, io, res.body);
      });
    });
}

function addCalendarReads(calendar: Command, io: CliIo): void {
  withClientOptions(calendar.command('get').argument('<name>', 'calendar name').description('show a calendar')).action(
    async (name: string, opts: ClientOptions) => {
      await withClient(opts, io, async (client) => {
        const { body } = await client.call('GET', `/v1/calendars/${seg(calendarName(name))}`);
        printOne(client, io, body);
      });
    },
  );
  withClientOptions(calendar.command('list').description('list calendars')).action(async (opts: ClientOptions) => {
    await withClient(opts, io, async (client) => {
      const { body } = await client.call('GET', '/v1/calendars');
      if (client.json) return printJson(io, body);
      const calendars = isPlainObject(body) && Array.isArray(body.calendars) ? (body.calendars as Record<string, unknown>[]) : [];
      io.stdout.write(calendarsTable(calendars));
    });
  });
  withClientOptions(calendar.command('delete').argument('<name>', 'calendar name').description('delete a calendar')).action(
    async (name: string, opts: ClientOptions) => {
      await withClient(opts, io, async (client) => {
        const { body } = await client.call('DELETE', `/v1/calendars/${seg(calendarName(name))}`);
        if (client.json) return printOne(client, io, body);
        io.stdout.write(`deleted calendar ${name}\n`);
      });
    },
  );
}

export function registerCalendarCommands(program: Command, io: CliIo): void {
  const calendar = program.command('calendar').description('define exclusion calendars (dates recurring jobs skip)');
  addCalendarPut(calendar, io);
  addCalendarReads(calendar, io);
}
