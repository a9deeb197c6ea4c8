/**
 * "Open config": a model's `config.pbtxt` in a JupyterLab editor tab, checked on every
 * save by the server's validator (`models/<m>/config/validate`, the checks `ConfigEditor`
 * and `%%pbtxt` apply). Problems show three ways: a banner above the editor listing them by
 * line (a click goes to the line), the lines themselves marked, and the panel's list.
 *
 * The file is saved by JupyterLab as any file is; the check says whether the model will
 * load it, and a valid save offers to reload the model.
 */

import { MainAreaWidget, Notification } from '@jupyterlab/apputils';
import { CodeMirrorEditor } from '@jupyterlab/codemirror';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { IDocumentWidget } from '@jupyterlab/docregistry';
import { FileEditor } from '@jupyterlab/fileeditor';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { IProblem, WorkbenchAPI } from './api';
import { button, element } from './dom';
import { lineMarks, showLineMarks } from './linemarks';
import { describeProblem } from './modellist';
import { IRepositoryPlace } from './serverview';

/** The outcome of one check of a model's config. */
export interface IConfigCheck {
  model: string;
  /** the file, relative to the Jupyter root */
  path: string;
  problems: IProblem[];
}

/** Where `repository` lies relative to the Jupyter root (`serverRoot` of the page). */
export function repositoryPlace(
  repository: string,
  serverRoot: string
): IRepositoryPlace {
  const repo = trimSlashes(repository);
  const root = trimSlashes(serverRoot);
  let relative: string | null = null;
  if (repo === root) {
    relative = '';
  } else if (repo.startsWith(`${root}/`)) {
    relative = repo.slice(root.length + 1);
  } else if (root.startsWith('~')) {
    // the page may give the root as ~/...: match its tail inside the absolute path
    const tail = root.slice(1);
    const at = tail ? repo.indexOf(`${tail}/`) : -1;
    relative = at >= 0 ? repo.slice(at + tail.length + 1) : null;
  }
  return {
    relative,
    note:
      relative === null
        ? `The repository is outside the Jupyter root (${serverRoot || '/'}), so its ` +
          'configs cannot open in an editor here. Serve a repository under the root ' +
          '(c.Workbench.model_repository) or start Jupyter in a parent folder.'
        : ''
  };
}

/** The model whose config `path` (relative to the Jupyter root) is, or null. */
export function modelOf(path: string, place: IRepositoryPlace): string | null {
  if (place.relative === null) {
    return null;
  }
  const prefix = place.relative ? `${place.relative}/` : '';
  const match = path.startsWith(prefix)
    ? /^([^/]+)\/config\.pbtxt$/.exec(path.slice(prefix.length))
    : null;
  return match ? match[1] : null;
}

function trimSlashes(path: string): string {
  return path.replace(/\\/g, '/').replace(/\/+$/, '');
}

export class ConfigEditors {
  constructor(
    private readonly _api: WorkbenchAPI,
    private readonly _docManager: IDocumentManager,
    private readonly _reload: (model: string) => Promise<void>
  ) {}

  /** Each check's outcome (on open and on every save). */
  get checked(): ISignal<this, IConfigCheck> {
    return this._checked;
  }

  /** Open (or reveal) `model`'s config.pbtxt under the repository at `place`. */
  async open(model: string, place: IRepositoryPlace): Promise<void> {
    if (place.relative === null) {
      throw new Error(place.note);
    }
    const path = [place.relative, model, 'config.pbtxt']
      .filter(Boolean)
      .join('/');
    const widget = this._docManager.openOrReveal(path, 'Editor') as
      IDocumentWidget<FileEditor> | undefined;
    if (!widget) {
      throw new Error(`JupyterLab could not open ${path}`);
    }
    await this.adopt(widget, place);
  }

  /**
   * Check `widget` on save when it edits a model's config.pbtxt in the repository at
   * `place` (however it was opened: from the panel or the file browser).
   */
  async adopt(
    widget: IDocumentWidget<FileEditor>,
    place: IRepositoryPlace
  ): Promise<void> {
    const path = widget.context.path;
    const model = modelOf(path, place);
    if (model === null || this._open.has(widget)) {
      return;
    }
    this._open.add(widget);
    await this._watch(model, path, widget);
  }

  /** Dismiss the last notification about `path`: a newer check supersedes it. */
  private _notify(model: string, path: string, problems: IProblem[]): void {
    const last = this._notices.get(path);
    if (last) {
      Notification.dismiss(last);
    }
    this._notices.set(path, notify(model, path, problems, this._reload));
  }

  private async _watch(
    model: string,
    path: string,
    widget: IDocumentWidget<FileEditor>
  ): Promise<void> {
    const banner = new ProblemBanner(
      model,
      line => goToLine(widget, line),
      this._reload
    );
    if (widget instanceof MainAreaWidget) {
      widget.contentHeader.addWidget(banner);
    }
    widget.disposed.connect(() => this._open.delete(widget));
    widget.context.saveState.connect((_, state) => {
      if (state === 'completed') {
        void this._check(model, path, widget, banner, true);
      }
    });
    await widget.context.ready;
    await widget.content.ready;
    const editor = widget.content.editor;
    if (editor instanceof CodeMirrorEditor) {
      editor.injectExtension(lineMarks);
    }
    await this._check(model, path, widget, banner, false);
  }

  private async _check(
    model: string,
    path: string,
    widget: IDocumentWidget<FileEditor>,
    banner: ProblemBanner,
    saved: boolean
  ): Promise<void> {
    let problems: IProblem[];
    try {
      problems = (
        await this._api.validate(model, widget.context.model.toString())
      ).problems;
    } catch (error) {
      Notification.warning(
        `${path} was not checked: ${(error as Error).message}`,
        {
          autoClose: 8000
        }
      );
      return;
    }
    if (widget.isDisposed) {
      return;
    }
    banner.render(problems, saved);
    const editor = widget.content.editor;
    if (editor instanceof CodeMirrorEditor) {
      showLineMarks(
        editor.editor,
        problems
          .filter(p => p.line)
          .map(p => ({ line: p.line!, message: describeProblem(p) }))
      );
    }
    this._checked.emit({ model, path, problems });
    if (saved) {
      this._notify(model, path, problems);
    }
  }

  private _open = new Set<IDocumentWidget<FileEditor>>();
  private _notices = new Map<string, string>();
  private _checked = new Signal<this, IConfigCheck>(this);
}

function notify(
  model: string,
  path: string,
  problems: IProblem[],
  reload: (model: string) => Promise<void>
): string {
  if (problems.length === 0) {
    return Notification.success(
      `${path} is valid. Reload ${model} to serve it.`,
      {
        autoClose: 6000,
        actions: [
          { label: `Reload ${model}`, callback: () => void reload(model) }
        ]
      }
    );
  }
  const lines = problems.filter(p => p.line).map(p => p.line);
  const where = lines.length ? ` (line ${[...new Set(lines)].join(', ')})` : '';
  return Notification.error(
    `${path}: ${problems.length === 1 ? 'a problem' : `${problems.length} problems`}` +
      `${where}. ${model} will not load this config: ${describeProblem(problems[0])}`,
    { autoClose: 10000 }
  );
}

function goToLine(widget: IDocumentWidget<FileEditor>, line: number): void {
  const editor = widget.content.editor;
  const position = { line: line - 1, column: 0 };
  editor.setCursorPosition(position);
  editor.revealPosition(position);
  editor.focus();
}

/** Above the editor: the last check's problems by line, or that the file is valid. */
class ProblemBanner extends Widget {
  constructor(
    private readonly _model: string,
    private readonly _goTo: (line: number) => void,
    private readonly _reload: (model: string) => Promise<void>
  ) {
    super();
    this.addClass('jp-TritonWorkbench-banner');
    this.hide();
  }

  render(problems: IProblem[], saved: boolean): void {
    this.node.classList.toggle('jp-mod-invalid', problems.length > 0);
    if (problems.length === 0) {
      this.node.replaceChildren(
        element(
          'span',
          'jp-TritonWorkbench-bannerText',
          {},
          saved
            ? `Saved and valid: reload ${this._model} to serve this config.`
            : `Valid: ${this._model} loads this config. It is checked again on every save.`
        ),
        button({
          label: `Reload ${this._model}`,
          onClick: () => void this._reload(this._model)
        })
      );
    } else {
      const count =
        problems.length === 1 ? '1 problem' : `${problems.length} problems`;
      this.node.replaceChildren(
        element(
          'div',
          'jp-TritonWorkbench-bannerText',
          {},
          `${count}: ${this._model} will not load this config.`
        ),
        element('ul', '', {}, ...problems.map(p => this._item(p)))
      );
    }
    this.show();
    this._fitHeight();
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    if (msg.width >= 0 && msg.width !== this._width) {
      this._width = msg.width;
      this._fitHeight(); // the problems wrap differently
    }
  }

  /**
   * The content header is a Lumino BoxPanel: it gives a child the height of its CSS
   * min-height, so the banner sets it to the height its content needs at this width. (The
   * layout also sets `contain: strict`, under which an auto height ignores the content.)
   */
  private _fitHeight(): void {
    const style = this.node.style;
    const { height, contain } = style;
    style.height = 'auto';
    style.contain = 'none';
    style.minHeight = '';
    const needed = `${Math.ceil(this.node.getBoundingClientRect().height)}px`;
    style.height = height;
    style.contain = contain;
    style.minHeight = needed;
    if (needed !== this._needed) {
      this._needed = needed;
      this.parent?.fit();
    }
  }

  private _width = -1;
  private _needed = '';

  private _item(problem: IProblem): HTMLElement {
    const item = element('li', '', {}, describeProblem(problem));
    if (problem.line) {
      const line = problem.line;
      item.classList.add('jp-mod-link');
      item.title = `Go to line ${line}`;
      item.addEventListener('click', () => this._goTo(line));
    }
    return item;
  }
}
