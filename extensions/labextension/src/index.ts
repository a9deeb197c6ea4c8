/**
 * Triton Workbench in JupyterLab: a left-sidebar panel over the server extension's REST API
 * (`workbench/jupyter/handlers.py`), a command palette entry and a launcher card that open it.
 */

import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { IDocumentWidget } from '@jupyterlab/docregistry';
import { FileEditor, IEditorTracker } from '@jupyterlab/fileeditor';
import { ILauncher } from '@jupyterlab/launcher';
import { INotebookTracker } from '@jupyterlab/notebook';

import { WorkbenchAPI } from './api';
import { ConfigEditors } from './configs';
import { workbenchIcon } from './icon';
import { WorkbenchPanel } from './panel';
import { NotebookTuner } from './tune';

/** The command that opens (or reveals) the panel. */
export const OPEN_PANEL = 'triton-workbench:open';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'triton-workbench-labextension:plugin',
  description:
    'The Triton Workbench model server in a sidebar panel: endpoints, models, live statistics, configs.',
  autoStart: true,
  requires: [IDocumentManager, INotebookTracker],
  optional: [ICommandPalette, ILauncher, ILayoutRestorer, IEditorTracker],
  activate: (
    app: JupyterFrontEnd,
    docManager: IDocumentManager,
    notebooks: INotebookTracker,
    palette: ICommandPalette | null,
    launcher: ILauncher | null,
    restorer: ILayoutRestorer | null,
    editors: IEditorTracker | null
  ) => {
    const api = new WorkbenchAPI(app.serviceManager.serverSettings);
    // a valid save offers a reload, which the panel does (and shows)
    const configs: ConfigEditors = new ConfigEditors(
      api,
      docManager,
      (name: string): Promise<void> => panel.load(name)
    );
    const panel: WorkbenchPanel = new WorkbenchPanel({
      api,
      configs,
      tuner: new NotebookTuner(app, notebooks, api)
    });
    app.shell.add(panel, 'left', { rank: 850 });
    restorer?.add(panel, 'triton-workbench');
    // a config.pbtxt opened from the file browser (or restored with the layout) is checked
    // on save too
    const adopt = (widget: IDocumentWidget<FileEditor>) => {
      const place = panel.place;
      if (place) {
        void configs.adopt(widget, place);
      }
    };
    editors?.widgetAdded.connect((_, widget) => adopt(widget));
    void panel.refresh().then(() => editors?.forEach(adopt));

    app.commands.addCommand(OPEN_PANEL, {
      label: args =>
        args.isLauncher ? 'Triton Workbench' : 'Open Triton Workbench',
      caption:
        'The model server, its models, live statistics and their configs',
      icon: workbenchIcon,
      execute: () => app.shell.activateById(panel.id)
    });
    palette?.addItem({ command: OPEN_PANEL, category: 'Triton Workbench' });
    launcher?.add({
      command: OPEN_PANEL,
      args: { isLauncher: true },
      category: 'Other',
      rank: 0
    });
  }
};

export default plugin;
