/**
 * The panel's model list: one row per model with its versions, state and failure reason,
 * live throughput and p99 sparklines, the load/unload/reload buttons, "Open config",
 * "Tune in a notebook", and the problems found the last time its config was saved.
 *
 * Rows are kept by model name and updated in place, so a refresh every few seconds does
 * not move the focus or flicker.
 */

import {
  editIcon,
  fileIcon,
  notebookIcon,
  refreshIcon,
  runIcon,
  stopIcon
} from '@jupyterlab/ui-components';

import { IModel, IModelStats, IProblem } from './api';
import { button, element } from './dom';
import { sparkline } from './sparkline';

/** What a row's buttons ask for; the panel does the work. */
export interface IModelHandlers {
  load(name: string): void;
  unload(name: string): void;
  openConfig(name: string): void;
  tune(name: string, kind: TuneKind): void;
}

/** `edit`: a `bench.edit(...)` cell; `sweep`: a `bench.sweep(...)` cell. */
export type TuneKind = 'edit' | 'sweep';

/** Samples drawn: a minute at the server's default one-second interval. */
const WINDOW = 60;
const SPARK = { width: 56, height: 18 };

/** One model, whatever its versions: its rows of the repository index merged. */
export interface IModelSummary {
  name: string;
  versions: string[];
  state: string;
  reason: string;
}

export function summarize(rows: IModel[]): IModelSummary[] {
  const byName = new Map<string, IModel[]>();
  for (const row of rows) {
    byName.set(row.name, [...(byName.get(row.name) ?? []), row]);
  }
  return [...byName.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, versions]) => {
      const notReady = versions.find(v => v.state !== 'READY');
      return {
        name,
        versions: versions.map(v => v.version).filter(Boolean),
        state: notReady ? notReady.state || 'UNAVAILABLE' : 'READY',
        reason: versions
          .map(v => v.reason)
          .filter(Boolean)
          .join('; ')
      };
    });
}

export class ModelList {
  readonly node = element('ul', 'jp-TritonWorkbench-models', {
    'aria-label': 'Models'
  });

  constructor(private readonly _handlers: IModelHandlers) {}

  /** Show `models`; `configNote` (when set) says why configs cannot be opened. */
  update(models: IModelSummary[], configNote: string | null): void {
    const names = new Set(models.map(m => m.name));
    for (const [name, row] of this._rows) {
      if (!names.has(name)) {
        row.node.remove();
        this._rows.delete(name);
      }
    }
    models.forEach((model, index) => {
      let row = this._rows.get(model.name);
      if (!row) {
        row = new ModelRow(model.name, this._handlers);
        this._rows.set(model.name, row);
      }
      row.update(model, configNote);
      if (this.node.children[index] !== row.node) {
        this.node.insertBefore(row.node, this.node.children[index] ?? null);
      }
    });
  }

  updateStats(stats: IModelStats[]): void {
    for (const [name, row] of this._rows) {
      row.updateStats(newestVersion(stats.filter(s => s.name === name)));
    }
  }

  setBusy(name: string, what: string | null): void {
    this._rows.get(name)?.setBusy(what);
  }

  /** The problems of `name`'s saved config (an empty list: it is valid). */
  setProblems(name: string, file: string, problems: IProblem[]): void {
    this._rows.get(name)?.setProblems(file, problems);
  }

  get size(): number {
    return this._rows.size;
  }

  private _rows = new Map<string, ModelRow>();
}

function newestVersion(stats: IModelStats[]): IModelStats | undefined {
  return stats.sort((a, b) => Number(b.version) - Number(a.version))[0];
}

class ModelRow {
  readonly node: HTMLLIElement;

  constructor(
    readonly name: string,
    handlers: IModelHandlers
  ) {
    this._load = button({
      label: 'Load',
      icon: runIcon,
      onClick: () => handlers.load(name)
    });
    this._unload = button({
      label: 'Unload',
      icon: stopIcon,
      title: `Unload ${name}`,
      onClick: () => handlers.unload(name)
    });
    this._config = button({
      label: 'Config',
      icon: fileIcon,
      onClick: () => handlers.openConfig(name)
    });
    const edit = button({
      label: 'Edit',
      icon: editIcon,
      title: `Tune in a notebook: insert bench.edit("${name}") into the active notebook`,
      onClick: () => handlers.tune(name, 'edit')
    });
    const sweep = button({
      label: 'Sweep',
      icon: notebookIcon,
      title: `Tune in a notebook: insert bench.sweep("${name}", ...) into the active notebook`,
      onClick: () => handlers.tune(name, 'sweep')
    });
    this.node = element(
      'li',
      'jp-TritonWorkbench-model',
      { 'data-model': name },
      element(
        'div',
        'jp-TritonWorkbench-modelHead',
        {},
        this._dot,
        element('span', 'jp-TritonWorkbench-modelName', { title: name }, name),
        this._versions,
        this._state
      ),
      this._reason,
      this._stats,
      element(
        'div',
        'jp-TritonWorkbench-actions',
        {},
        this._load,
        this._unload,
        this._config
      ),
      element(
        'div',
        'jp-TritonWorkbench-actions',
        {},
        element(
          'span',
          'jp-TritonWorkbench-actionsLabel',
          {},
          'Tune in a notebook'
        ),
        edit,
        sweep
      ),
      this._problems
    );
    this._stats.hidden = true;
    this._problems.hidden = true;
  }

  update(model: IModelSummary, configNote: string | null): void {
    const ready = model.state === 'READY';
    // Triton says why a model is not READY; "unloaded" is no failure
    const failed = !ready && model.reason !== '' && model.reason !== 'unloaded';
    this._model = model;
    this._dot.dataset.state = model.state;
    this.node.classList.toggle('jp-mod-failed', failed);
    this._versions.textContent = model.versions.map(v => `v${v}`).join(' ');
    this._state.textContent = this._busy ?? model.state;
    this._reason.textContent = model.reason;
    this._reason.hidden = ready || !model.reason;
    this._reason.classList.toggle('jp-mod-error', failed);
    const label = ready ? 'Reload' : 'Load';
    const labelNode = this._load.querySelector(
      '.jp-TritonWorkbench-buttonLabel'
    )!;
    if (labelNode.textContent !== label) {
      labelNode.textContent = label;
      this._load.replaceChild(
        (ready ? refreshIcon : runIcon).element({
          tag: 'span',
          className: 'jp-TritonWorkbench-buttonIcon'
        }),
        this._load.firstChild!
      );
    }
    this._load.title = ready
      ? `Reload ${this.name} (its config and files are read again)`
      : `Load ${this.name}`;
    this._config.title =
      configNote ??
      `Open ${this.name}/config.pbtxt in an editor (checked on save)`;
    this._canOpenConfig = configNote === null;
    this._refreshDisabled();
  }

  updateStats(stats: IModelStats | undefined): void {
    const samples = (stats?.samples ?? []).slice(-WINDOW);
    this._stats.hidden = samples.length === 0;
    if (samples.length === 0) {
      return;
    }
    const latest = samples[samples.length - 1];
    const p99 =
      [...samples].reverse().find(s => s.p99_us !== null)?.p99_us ?? null;
    this._stats.replaceChildren(
      metric(
        formatRate(latest.requests_per_s),
        sparkline(
          samples.map(s => s.requests_per_s),
          {
            ...SPARK,
            label: `${this.name}: requests per second, last ${samples.length} samples`,
            className: 'jp-mod-throughput'
          }
        )
      ),
      metric(
        p99 === null ? 'p99 –' : formatMicros(p99),
        sparkline(
          samples.map(s => s.p99_us),
          {
            ...SPARK,
            label: `${this.name}: p99 latency (Triton's 60 s summary), last ${samples.length} samples`,
            className: 'jp-mod-latency'
          }
        )
      )
    );
  }

  setBusy(what: string | null): void {
    this._busy = what;
    this.node.classList.toggle('jp-mod-busy', what !== null);
    this._state.textContent = what ?? this._model?.state ?? '';
    this._refreshDisabled();
  }

  setProblems(file: string, problems: IProblem[]): void {
    this._problems.hidden = problems.length === 0;
    if (problems.length === 0) {
      this._problems.replaceChildren();
      return;
    }
    const count =
      problems.length === 1 ? '1 problem' : `${problems.length} problems`;
    this._problems.replaceChildren(
      element(
        'div',
        'jp-TritonWorkbench-problemsHead',
        { title: file },
        `config.pbtxt: ${count}`
      ),
      element(
        'ul',
        '',
        {},
        ...problems.map(p => element('li', '', {}, describeProblem(p)))
      )
    );
  }

  private _refreshDisabled(): void {
    const busy = this._busy !== null;
    const ready = this._model?.state === 'READY';
    this._load.disabled = busy;
    this._unload.disabled = busy || !ready;
    this._config.disabled = !this._canOpenConfig;
  }

  private _model: IModelSummary | null = null;
  private _busy: string | null = null;
  private _canOpenConfig = true;
  private _dot = element('span', 'jp-TritonWorkbench-dot', {
    'aria-hidden': 'true'
  });
  private _versions = element('span', 'jp-TritonWorkbench-versions');
  private _state = element('span', 'jp-TritonWorkbench-state');
  private _reason = element('div', 'jp-TritonWorkbench-reason');
  private _stats = element('div', 'jp-TritonWorkbench-stats');
  private _problems = element('div', 'jp-TritonWorkbench-problems', {
    role: 'alert'
  });
  private _load: HTMLButtonElement;
  private _unload: HTMLButtonElement;
  private _config: HTMLButtonElement;
}

/** `line 10: dynamic_batching.preferred_batch_size: preferred batch size 16 is ...`
 * (without the validator's `model '<name>': ` prefix: the model is named around it). */
export function describeProblem(problem: IProblem): string {
  const where = problem.line ? `line ${problem.line}: ` : '';
  const field = problem.field ? `${problem.field}: ` : '';
  return `${where}${field}${problem.message.replace(/^model '[^']*': /, '')}`;
}

function metric(value: string, chart: SVGSVGElement): HTMLElement {
  return element(
    'div',
    'jp-TritonWorkbench-metric',
    {},
    chart,
    element('span', 'jp-TritonWorkbench-metricValue', {}, value)
  );
}

function formatRate(perSecond: number): string {
  const digits = perSecond >= 100 ? 0 : 1;
  return `${perSecond.toFixed(digits)}/s`;
}

function formatMicros(us: number): string {
  if (us >= 1000) {
    const ms = us / 1000;
    return `${ms.toFixed(ms >= 100 ? 0 : 1)} ms`;
  }
  return `${Math.round(us)} µs`;
}
