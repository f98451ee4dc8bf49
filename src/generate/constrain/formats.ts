// String formats held as patterns: each is a subset of the format (every string it allows is
// valid for ajv-formats and for Python's format checkers), not the whole of it. The rest of the
// formats stay unenforced (listed in `unsupported`).

// No February 29th: a date valid in every year, without a leap-year automaton.
const DATE = '[0-9]{4}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)';
const TIME = '([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])';
const OCTET = '(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])';
const LABEL = '[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?';
// a URL's last host label starts with a letter: an all-digit one reads as an IPv4 address (WHATWG URL)
const TOP = '[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?';
const HEX = '[0-9a-fA-F]';
const PCHAR = "([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})";

const FORMATS: Record<string, string> = {
  date: `^${DATE}$`,
  time: `^${TIME}$`,
  'date-time': `^${DATE}T${TIME}$`,
  duration: '^P([0-9]{1,4}D(T[0-9]{1,4}H)?|T[0-9]{1,4}[HMS]|[0-9]{1,4}W)$',
  uuid: `^${HEX}{8}-${HEX}{4}-${HEX}{4}-${HEX}{4}-${HEX}{12}$`,
  ipv4: `^(${OCTET}\\.){3}${OCTET}$`,
  ipv6: `^(${HEX}{1,4}:){7}${HEX}{1,4}$`,
  hostname: `^${LABEL}(\\.${LABEL}){0,2}$`,
  email: `^[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+)*@(${LABEL}\\.){1,2}[A-Za-z]{2,24}$`,
  uri: `^https?://(${LABEL}\\.){0,2}${TOP}(/${PCHAR}*)*(\\?(${PCHAR}|[/?])*)?(#(${PCHAR}|[/?])*)?$`,
};
FORMATS['uri-reference'] = FORMATS.uri!;
FORMATS.iri = FORMATS.uri!;
FORMATS['iri-reference'] = FORMATS.uri!;
FORMATS['idn-email'] = FORMATS.email!;
FORMATS['idn-hostname'] = FORMATS.hostname!;

/** The pattern that holds a format, or undefined when the format is not enforced. */
export function formatPattern(format: string): string | undefined {
  return Object.hasOwn(FORMATS, format) ? FORMATS[format] : undefined;
}
