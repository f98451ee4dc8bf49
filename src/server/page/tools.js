// The one tool the page offers the model when the settings say so: `add`, run here in the page;
// its result goes back to the model as a `tool` message.

export const TOOLS = [{ type: 'function', function: { name: 'add', description: 'Add two integers.', parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] } } }];

/** The result text of one tool call (an error in words when it cannot run). */
export function runTool(call) {
  let args;
  try {
    args = JSON.parse(call.function.arguments || '{}');
  } catch {
    return 'error: the arguments are not JSON';
  }
  if (call.function.name === 'add' && Number.isFinite(args?.a) && Number.isFinite(args?.b)) return String(args.a + args.b);
  return `error: no tool ${call.function.name} taking these arguments`;
}
