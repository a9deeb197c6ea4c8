/**
 * The left-sidebar panel: the model server (state, endpoints, start/stop) and its models
 * (state, live statistics, actions).
 *
 * Two polls, both only while the panel is visible and the page is not hidden: status and
 * models every few seconds, statistics at the server's sampling interval (clamped to 1-10
 * s). Showing the panel refreshes both at once.
 */

import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { refreshIcon, runIcon, stopIcon } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { IModel, IStatus, WorkbenchAPI, WorkbenchAPIError } from './api';
import { ConfigEditors, repositoryPlace } from './configs';
import { button, element } from './dom';
import { workbenchIcon } from './icon';
import { ModelList, summarize, TuneKind } from './modellist';
import { IRepositoryPlace, ServerView } from './serverview';
import { NotebookTuner } from './tune';

const STATUS_INTERVAL_MS = 5000;

export interface IPanelOptions {
  api: WorkbenchAPI;
  configs: ConfigEditors;
  tuner: NotebookTuner;
}

export class WorkbenchPanel extends Widget {
  constructor(options: IPanelOptions) {
    super();
    this._api = options.api;
    this._configs = options.configs;
    this._tuner = options.tuner;
    this.id = 'triton-workbench-panel';
    this.addClass('jp-TritonWorkbench');
    this.title.icon = workbenchIcon;
    this.title.caption = 'Triton Workbench';
    this._models = new ModelList({
      load: name => void this.load(name),
      unload: name =>
        void this._act(name, 'unloading…', () => this._api.unload(name)),
      openConfig: name => void this._openConfig(name),
      tune: (name, kind) => void this._tune(name, kind)
    });
    this._configs.checked.connect((_, check) =>
      this._models.setProblems(check.model, check.path, check.problems)
    );
    this._build();
    this._statusPoll = new Poll({
      factory: () => this.refresh(),
      frequency: { interval: STATUS_INTERVAL_MS, backoff: false },
      standby: () => !this.isVisible || 'when-hidden',
      name: 'triton-workbench:status'
    });
    this._statsPoll = new Poll({
      factory: () => this._refreshStats(),
      frequency: { interval: 2000, backoff: false },
      standby: () =>
        !this.isVisible || this._status?.state !== 'running' || 'when-hidden',
      name: 'triton-workbench:stats'
    });
  }

  /** Read the status and the models now. */
  async refresh(): Promise<void> {
    try {
      this._status = await this._api.status();
      this._error = '';
      const running = this._status.state === 'running';
      this._rows = running ? await this._api.models() : [];
    } catch (error) {
      this._error =
        error instanceof WorkbenchAPIError && error.status === 404
          ? 'The Triton Workbench server extension is not enabled in this Jupyter server ' +
            '(jupyter server extension enable workbench).'
          : `Cannot reach the Triton Workbench server extension: ${(error as Error).message}`;
    }
    this._render();
  }

  /** Load `name`, or reload it when it is loaded. */
  async load(name: string): Promise<void> {
    const ready = this._rows.some(r => r.name === name && r.state === 'READY');
    await this._act(name, ready ? 'reloading…' : 'loading…', () =>
      this._api.load(name)
    );
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._statusPoll.dispose();
    this._statsPoll.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this._statusPoll.refresh();
    void this._statsPoll.refresh();
  }

  private _build(): void {
    const head = element(
      'header',
      'jp-TritonWorkbench-head',
      {},
      element(
        'div',
        'jp-TritonWorkbench-row',
        {},
        element('h2', 'jp-TritonWorkbench-title', {}, 'Triton Workbench'),
        element('span', 'jp-TritonWorkbench-spacer'),
        button({
          label: 'Refresh',
          icon: refreshIcon,
          iconOnly: true,
          className: 'jp-TritonWorkbench-iconButton',
          onClick: () => void this._refreshAll()
        })
      ),
      element(
        'div',
        'jp-TritonWorkbench-row',
        {},
        this._statePill,
        this._engine,
        element('span', 'jp-TritonWorkbench-spacer'),
        this._startStop
      )
    );
    this._modelsHead.append(
      element('h3', '', {}, 'Models'),
      this._modelsCount,
      element('span', 'jp-TritonWorkbench-spacer'),
      element(
        'span',
        'jp-TritonWorkbench-legend jp-mod-throughput',
        {},
        'req/s'
      ),
      element('span', 'jp-TritonWorkbench-legend jp-mod-latency', {}, 'p99')
    );
    this.node.append(
      head,
      this._message,
      this._server.node,
      this._modelsHead,
      this._models.node,
      this._empty
    );
  }

  private _render(): void {
    const status = this._status;
    this._message.textContent = this._error;
    this._message.hidden = !this._error;
    const state = status?.state ?? 'unknown';
    this._statePill.textContent = state;
    this._statePill.dataset.state = state;
    this._engine.textContent = status?.engine ?? '';
    this._engine.title = status
      ? `Triton Workbench ${status.version}` +
        (status.server_version ? ` · server ${status.server_version}` : '') +
        (status.started ? ` · started ${status.started}` : '')
      : '';
    this._renderStartStop(status);
    const place = this._place();
    this._server.update(
      status,
      status ? this._api.proxyURL(status) : '',
      place
    );
    const models = summarize(this._rows);
    const note = place && place.relative === null ? place.note : null;
    this._models.update(models, note);
    const running = state === 'running';
    this._modelsHead.hidden = !running;
    this._modelsCount.textContent = running ? String(models.length) : '';
    this._empty.hidden = !running || models.length > 0;
    this._empty.textContent = 'The repository has no models.';
  }

  private _renderStartStop(status: IStatus | null): void {
    const state = status?.state;
    const stoppable = state === 'running' || state === 'starting';
    const label = stoppable ? 'Stop' : 'Start';
    this._startStop.querySelector(
      '.jp-TritonWorkbench-buttonLabel'
    )!.textContent = label;
    this._startStop.replaceChild(
      (stoppable ? stopIcon : runIcon).element({
        tag: 'span',
        className: 'jp-TritonWorkbench-buttonIcon'
      }),
      this._startStop.firstChild!
    );
    this._startStop.title = stoppable
      ? 'Stop the model server (every notebook attached to it loses it)'
      : 'Start the model server on the repository';
    this._startStop.disabled =
      !status ||
      state === 'stopping' ||
      state === 'starting' ||
      !status.model_repository;
  }

  /** Where the served repository is for the Jupyter root (null: none is served). */
  get place(): IRepositoryPlace | null {
    return this._place();
  }

  private _place(): IRepositoryPlace | null {
    const repository = this._status?.model_repository;
    return repository
      ? repositoryPlace(repository, PageConfig.getOption('serverRoot'))
      : null;
  }

  private async _refreshAll(): Promise<void> {
    await this.refresh();
    await this._refreshStats();
  }

  private async _refreshStats(): Promise<void> {
    if (this._status?.state !== 'running') {
      return;
    }
    try {
      const stats = await this._api.stats();
      this._models.updateStats(stats.models);
      const interval = Math.min(Math.max(stats.interval_s, 1), 10) * 1000;
      if (this._statsPoll.frequency.interval !== interval) {
        this._statsPoll.frequency = { ...this._statsPoll.frequency, interval };
      }
    } catch {
      // the status poll reports a server that went away
    }
  }

  private async _startOrStop(): Promise<void> {
    const state = this._status?.state;
    if (state === 'running' || state === 'starting') {
      const answer = await showDialog({
        title: 'Stop the model server?',
        body:
          'Every model unloads and every notebook attached to this server loses it. ' +
          'Start brings it back.',
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Stop' })]
      });
      if (!answer.button.accept) {
        return;
      }
      await this._serverAction('stopping', () => this._api.stop());
    } else {
      await this._serverAction('starting', () => this._api.start());
    }
  }

  private async _serverAction(
    state: 'starting' | 'stopping',
    work: () => Promise<IStatus>
  ): Promise<void> {
    if (this._status) {
      this._status = { ...this._status, state };
      this._render();
    }
    try {
      this._status = await work();
    } catch (error) {
      const verb = state === 'starting' ? 'start' : 'stop';
      Notification.error(`The model server did not ${verb}: ${message(error)}`);
    }
    await this._refreshAll();
  }

  private async _act(
    name: string,
    busy: string,
    work: () => Promise<IModel[]>
  ): Promise<void> {
    this._models.setBusy(name, busy);
    try {
      const rows = await work();
      this._rows = [...this._rows.filter(r => r.name !== name), ...rows];
    } catch (error) {
      Notification.error(`${name}: ${message(error)}`, { autoClose: 10000 });
      await this.refresh();
    } finally {
      this._models.setBusy(name, null);
    }
    this._render();
  }

  private async _openConfig(name: string): Promise<void> {
    const place = this._place();
    try {
      if (!place) {
        throw new Error('no model repository is being served');
      }
      await this._configs.open(name, place);
    } catch (error) {
      Notification.error(`${name}/config.pbtxt: ${message(error)}`, {
        autoClose: 10000
      });
    }
  }

  private async _tune(name: string, kind: TuneKind): Promise<void> {
    try {
      const path = await this._tuner.tune(name, kind);
      Notification.info(
        `Inserted a ${kind} cell for ${name} into ${path}: run it to start.`,
        {
          autoClose: 4000
        }
      );
    } catch (error) {
      Notification.error(`Tune ${name}: ${message(error)}`);
    }
  }

  private _api: WorkbenchAPI;
  private _configs: ConfigEditors;
  private _tuner: NotebookTuner;
  private _status: IStatus | null = null;
  private _rows: IModel[] = [];
  private _error = '';
  private _statusPoll: Poll;
  private _statsPoll: Poll;
  private _models: ModelList;
  private _server = new ServerView();
  private _statePill = element('span', 'jp-TritonWorkbench-pill', {
    role: 'status'
  });
  private _engine = element('span', 'jp-TritonWorkbench-muted');
  private _startStop = button({
    label: 'Start',
    icon: runIcon,
    className: 'jp-TritonWorkbench-startStop',
    onClick: () => void this._startOrStop()
  });
  private _message = element('div', 'jp-TritonWorkbench-error', {
    role: 'alert'
  });
  private _modelsHead = element('div', 'jp-TritonWorkbench-modelsHead');
  private _modelsCount = element('span', 'jp-TritonWorkbench-count');
  private _empty = element('p', 'jp-TritonWorkbench-muted');
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
