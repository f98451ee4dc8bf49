// A generation run alone rather than in the batched loop: speculative decoding (its sweeps are
// multi-token forwards of one sequence) and the run report (the store's read counters must count
// this generation only). Same sampling, stop rules and events as the batched loop, so greedy and
// seeded output are the same bytes either way (docs/NUMERICS.md); it starts from an empty state
// and leaves nothing in the prefix cache.

import type { Model } from '../model/model.js';
import { greedy } from '../generate/greedy.js';
import { RunRecorder } from '../generate/report.js';
import type { Sampler } from '../generate/sampling.js';
import { speculative } from '../generate/spec.js';
import { acceptDraft, acceptDraftFrom } from '../generate/spec-sample.js';
import { SuffixDrafter } from '../generate/suffix-draft.js';
import { loadDSpark } from '../generate/dspark-draft.js';
import type { TextStopper } from '../generate/stop.js';
import { sampleConstrained } from '../generate/constrain/index.js';
import { UserError } from '../util/errors.js';
import { addSpecRun } from './spec-stats.js';
import { logprobsOf, type GenerationResult, type JobOptions, type TokenEvent } from './events.js';

/** `sampler` and `stopper` are the job's, made from `opts` (Engine.run checks the options by making them). */
export async function generateAlone(model: Model, prompt: number[], opts: JobOptions, chunk: number, sampler: Sampler, stopper: TextStopper, onToken: (e: TokenEvent) => void): Promise<GenerationResult> {
  const V = model.config.vocabSize;
  const c = opts.constraint;
  if (c && ((opts.spec ?? 0) > 0 || opts.drafter !== undefined)) throw new UserError('speculative decoding (spec, drafter) cannot be combined with constrained output');
  const dspark = opts.drafter !== undefined ? loadDSpark(model, opts.drafter) : null;
  const block = dspark?.config.block ?? 0;
  if ((opts.specWidth ?? 0) > block) throw new UserError(`specWidth ${opts.specWidth} is more than the drafter's block of ${block}`);
  // sampled output: the drafter samples its block at the sampler's temperature (its own stream of the seed)
  if (dspark && !sampler.greedy) dspark.sampleFrom(sampler.opts.temperature, BigInt(sampler.opts.seed) ^ 0x44537061726bn);
  const s = sampler.opts;
  const penalized = s.repetitionPenalty !== 1 || s.presencePenalty !== 0 || s.frequencyPenalty !== 0;
  const history = (generated: readonly number[]): number[] => (penalized ? [...prompt, ...generated] : []);
  const spec = dspark ? (opts.specWidth ?? block) : (opts.spec ?? 0);
  // speculative runs always record their sweeps: /metrics counts them (spec-stats.ts)
  const recorder = opts.report || spec > 0 ? new RunRecorder(model.store) : undefined;
  const drafterBytes0 = dspark?.bytesRead ?? 0;
  // The logits a chosen id came from, for its logprobs (pick / accept run just before onToken).
  let chosenFrom: Float32Array | null = null;
  const t0 = performance.now();
  let tFirst = t0;
  const state = model.newState();
  try {
    const r = await (spec > 0 ? speculative : greedy)(model, state, prompt, opts.maxTokens, {
      spec,
      drafter: dspark ?? new SuffixDrafter(),
      fixedWidth: opts.specWidth !== undefined,
      chunk,
      recorder,
      signal: opts.signal,
      pick: (logits, generated) => {
        chosenFrom = logits;
        if (!c) return sampler.sample(logits, history(generated), V);
        const id = sampleConstrained(sampler, logits, history(generated), V, c, opts.maxTokens - generated.length);
        c.accept(id);
        return id;
      },
      accept: (logits, draft, generated, i) => {
        chosenFrom = logits;
        const q = dspark?.lastQ[i];
        return q ? acceptDraftFrom(sampler, logits, draft, q, history(generated), V) : acceptDraft(sampler, logits, draft, history(generated), V);
      },
      onToken: (id) => {
        if (stopper.ids.length === 0) tFirst = performance.now();
        const { text, stop } = stopper.push(id);
        const ev: TokenEvent = { id, text };
        if (opts.logprobs !== undefined && chosenFrom) Object.assign(ev, logprobsOf(chosenFrom, V, id, opts.logprobs));
        onToken(ev);
        return stop || opts.signal?.aborted === true;
      },
    });
    const aborted = opts.signal?.aborted === true && !stopper.stopped;
    if (aborted) stopper.finish('interrupted');
    else stopper.finish();
    const report = recorder?.summary();
    if (report && spec > 0) addSpecRun(model, report, (dspark?.bytesRead ?? 0) - drafterBytes0);
    const decodeSeconds = r.stepSeconds.reduce((a, b) => a + b, 0);
    const n = stopper.ids.length;
    return {
      ids: [...stopper.ids],
      text: stopper.text,
      stopReason: aborted ? 'aborted' : stopper.reason!,
      promptTokens: prompt.length,
      cachedTokens: 0,
      timings: {
        queueSeconds: 0,
        promptSeconds: r.prefillSeconds,
        decodeSeconds,
        firstTokenSeconds: (tFirst - t0) / 1000,
        tokensPerSecond: decodeSeconds > 0 && n > 1 ? (n - 1) / decodeSeconds : 0,
      },
      ...(opts.report ? { report } : {}),
    };
  } finally {
    model.release(state);
  }
}
