/**
 * Problem lines marked in a CodeMirror 6 editor: a line decoration (a tinted background
 * and a red bar) on each line a config problem names, with the problem as its tooltip.
 * The marks follow edits (they are mapped through changes) until the next check.
 */

import { RangeSetBuilder, StateEffect, StateField } from '@codemirror/state';
import { Decoration, DecorationSet, EditorView } from '@codemirror/view';

/** 1-based line and what is wrong there. */
export interface ILineMark {
  line: number;
  message: string;
}

const setMarks = StateEffect.define<ILineMark[]>();

const marks = StateField.define<DecorationSet>({
  create: () => Decoration.none,
  update(decorations, transaction) {
    let next = decorations.map(transaction.changes);
    for (const effect of transaction.effects) {
      if (effect.is(setMarks)) {
        next = build(transaction.state.doc, effect.value);
      }
    }
    return next;
  },
  provide: field => EditorView.decorations.from(field)
});

/** The extension to inject once into an editor before `showLineMarks`. */
export const lineMarks = marks;

export function showLineMarks(view: EditorView, found: ILineMark[]): void {
  view.dispatch({ effects: setMarks.of(found) });
}

function build(
  doc: { lines: number; line(n: number): { from: number } },
  found: ILineMark[]
): DecorationSet {
  const byLine = new Map<number, string[]>();
  for (const mark of found) {
    if (mark.line >= 1 && mark.line <= doc.lines) {
      byLine.set(mark.line, [...(byLine.get(mark.line) ?? []), mark.message]);
    }
  }
  const builder = new RangeSetBuilder<Decoration>();
  for (const line of [...byLine.keys()].sort((a, b) => a - b)) {
    const decoration = Decoration.line({
      attributes: {
        class: 'jp-TritonWorkbench-problemLine',
        title: byLine.get(line)!.join('\n')
      }
    });
    const from = doc.line(line).from;
    builder.add(from, from, decoration);
  }
  return builder.finish();
}
