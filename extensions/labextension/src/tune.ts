/**
 * "Tune in a notebook": a code cell with `bench.edit("<model>")` (the config form) or
 * `bench.sweep("<model>", ...)` (a live batching or instance sweep), inserted below the
 * active cell of the current notebook (or into it, when it is an empty code cell), or into a
 * new notebook when none is open.
 *
 * The cell starts with `Workbench.attach()`, which finds the server this JupyterLab runs
 * (shared by every notebook, kept across kernel restarts), unless the notebook attaches
 * already. The cell is inserted, not run: the user reads it, adjusts it and runs it.
 */

import { JupyterFrontEnd } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { WorkbenchAPI } from './api';
import { TuneKind } from './modellist';

const ATTACH = [
  'import workbench as wb',
  '',
  '# the model server of this JupyterLab, shared by all notebooks',
  'bench = wb.Workbench.attach()'
];

/** What a sweep can vary for a model, from its config. */
export interface ISweepShape {
  /** `max_batch_size` > 0: sweep the batch size and the dynamic batcher's delay */
  batching: boolean;
  /** an ensemble schedules its steps: sweep only the concurrency */
  ensemble: boolean;
}

/** The cell's code; `attach`: start with the attach lines. */
export function tuneCode(
  model: string,
  kind: TuneKind,
  shape: ISweepShape,
  attach: boolean
): string {
  const name = JSON.stringify(model);
  const body =
    kind === 'edit'
      ? [`bench.edit(${name})`]
      : [
          'result = bench.sweep(',
          `    ${name},`,
          ...sweepSettings(shape),
          ')',
          'result'
        ];
  return [...(attach ? [...ATTACH, ''] : []), ...body].join('\n');
}

function sweepSettings(shape: ISweepShape): string[] {
  if (shape.ensemble) {
    return ['    concurrency=[1, 4, 16],'];
  }
  if (shape.batching) {
    return [
      '    max_batch_size=[1, 8],',
      '    max_queue_delay_microseconds=[0, 500],',
      '    concurrency=[1, 8],'
    ];
  }
  return ['    instance_count=[1, 2],', '    concurrency=[1, 4],'];
}

export class NotebookTuner {
  constructor(
    private readonly _app: JupyterFrontEnd,
    private readonly _notebooks: INotebookTracker,
    private readonly _api: WorkbenchAPI
  ) {}

  /** Insert the cell for `model` and show it; returns the notebook's path. */
  async tune(model: string, kind: TuneKind): Promise<string> {
    const shape = kind === 'sweep' ? await this._shape(model) : NO_SHAPE;
    const panel = this._notebooks.currentWidget ?? (await this._newNotebook());
    await panel.context.ready;
    const notebook = panel.content;
    const cells = panel.model!.sharedModel;
    const attached = cells.cells.some(cell =>
      cell.getSource().includes('Workbench.attach(')
    );
    const source = tuneCode(model, kind, shape, !attached);
    // an empty code cell at the cursor (or a new notebook's only cell) takes the code;
    // otherwise it goes below the active cell
    const active = notebook.activeCellIndex;
    const empty = [active, cells.cells.length === 1 ? 0 : -1].find(i => {
      const cell = i >= 0 ? cells.cells[i] : undefined;
      return cell?.cell_type === 'code' && cell.getSource().trim() === '';
    });
    let index: number;
    if (empty !== undefined) {
      index = empty;
      cells.cells[index].setSource(source);
    } else {
      index = active >= 0 ? active + 1 : cells.cells.length;
      cells.insertCell(index, { cell_type: 'code', source });
    }
    this._app.shell.activateById(panel.id);
    notebook.activeCellIndex = index;
    const cell = notebook.widgets[index];
    if (cell) {
      await notebook.scrollToCell(cell);
    }
    return panel.context.path;
  }

  private async _shape(model: string): Promise<ISweepShape> {
    try {
      const config = (await this._api.config(model)).config ?? {};
      return {
        batching: Number(config.max_batch_size ?? 0) > 0,
        ensemble: config.platform === 'ensemble'
      };
    } catch {
      return { batching: false, ensemble: false };
    }
  }

  private async _newNotebook(): Promise<NotebookPanel> {
    const panel = (await this._app.commands.execute('notebook:create-new', {
      kernelName: 'python3'
    })) as NotebookPanel;
    await panel.context.ready;
    return panel;
  }
}

const NO_SHAPE: ISweepShape = { batching: false, ensemble: false };
