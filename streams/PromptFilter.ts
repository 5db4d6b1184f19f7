/**
 * The prompt filter: removes unsafe words from prompts before they reach a pipeline. Censoring is
 * not an error (spec "Prompt-submission result": `was_censored` is a flag in a success body): the
 * offending words are dropped and the rest of the prompt is kept.
 *
 * Applied on every path a prompt takes to a model — create, PATCH and the beta prompt endpoint —
 * so no route bypasses it. Negative prompts are left alone (they keep content out). The word list
 * is `streams/data/prompt-blocklist.txt` (format in its header).
 */
import { readFileSync } from 'node:fs';

export interface FilterResult<T> {
  value: T;
  censored: boolean;
}

const DEFAULT_LIST = new URL('./data/prompt-blocklist.txt', import.meta.url);

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

export class PromptFilter {
  readonly #pattern: RegExp | null;
  readonly size: number;

  constructor(entries: readonly string[]) {
    const alternatives = entries
      .map((e) => e.trim().toLowerCase())
      .filter((e) => e && !e.startsWith('#'))
      .map((e) => {
        const prefix = e.endsWith('*');
        const body = (prefix ? e.slice(0, -1) : e).split(/\s+/).map(escape).join('\\s+');
        return prefix ? `${body}[\\p{L}\\p{N}]*` : body;
      });
    this.size = alternatives.length;
    // Whole words: not preceded or followed by a letter or digit (Unicode-aware, so "sexton" stays).
    this.#pattern = alternatives.length ? new RegExp(`(?<![\\p{L}\\p{N}])(?:${alternatives.join('|')})(?![\\p{L}\\p{N}])`, 'giu') : null;
  }

  /** The list shipped in streams/data/prompt-blocklist.txt. */
  static fromFile(path: URL | string = DEFAULT_LIST): PromptFilter {
    return new PromptFilter(readFileSync(path, 'utf8').split('\n'));
  }

  /** Removes every listed word; whitespace and stray commas left behind are tidied. */
  text(prompt: string): FilterResult<string> {
    if (!this.#pattern) return { value: prompt, censored: false };
    let censored = false;
    const removed = prompt.replace(this.#pattern, () => {
      censored = true;
      return '';
    });
    if (!censored) return { value: prompt, censored };
    const tidy = removed
      .replace(/\s*,(\s*,)+/g, ',')
      .replace(/\s{2,}/g, ' ')
      .replace(/^[\s,]+|[\s,]+$/g, '');
    return { value: tidy, censored };
  }

  /** A prompt or a weighted list `[[prompt, weight], …]`; weights are kept. */
  prompt<T extends string | [string, number][]>(prompt: T): FilterResult<T> {
    if (typeof prompt === 'string') return this.text(prompt) as FilterResult<T>;
    let censored = false;
    const value = prompt.map(([text, weight]) => {
      const r = this.text(text);
      censored ||= r.censored;
      return [r.value, weight] as [string, number];
    });
    return { value: value as T, censored };
  }
}
