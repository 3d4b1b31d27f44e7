// A panel's states besides its data: loading (before its first answer), empty (an answer with
// nothing in it, said in the panel's own words) and error (it could not be read). Each is marked
// with `data-test` so a reader, or a test, can tell them apart from data.

import { esc } from './fmt.js';

/** A table body's row before its first answer. */
export const loadingRow = (cols = 1) =>
  `<tr data-test="panel-loading"><td class="empty" colspan="${cols}">loading…</td></tr>`;

/** A table body's row when the answer holds nothing (`text` is HTML). */
export const emptyRow = (text, cols = 1) =>
  `<tr data-test="panel-empty"><td class="empty" colspan="${cols}">${text}</td></tr>`;

/** A table body's row when its answer failed (`e` an Error). */
export const errorRow = (e, cols = 1) =>
  `<tr data-test="panel-error"><td class="empty bad" colspan="${cols}">could not load: ${esc(e.message)}</td></tr>`;

/** A block before its first answer. */
export const loadingBlock = '<p class="empty" data-test="panel-loading">loading…</p>';

/** A block when the answer holds nothing (`text` is HTML). */
export const emptyBlock = (text) => `<p class="empty" data-test="panel-empty">${text}</p>`;

/** An SVG drawing's text before its first answer. */
export const loadingSvg = '<text x="20" y="30" class="state" data-test="panel-loading">loading…</text>';

/** An SVG drawing's text when the answer holds nothing. */
export const emptySvg = (text) => `<text x="20" y="30" class="state" data-test="panel-empty">${esc(text)}</text>`;

/**
 * Turns every placeholder under `root` still loading into the error `e`: the panels that could
 * not be read say so and why, where they stand (those already drawn keep their data).
 */
export function failLoading(root, e) {
  for (const el of root.querySelectorAll('[data-test="panel-loading"]')) {
    el.dataset.test = 'panel-error';
    const cell = el.querySelector('td') || el;
    cell.classList.add('bad');
    cell.textContent = `could not load: ${e.message}`;
  }
}
