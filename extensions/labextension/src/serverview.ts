/**
 * The panel's server section: state, repository, endpoints with copy buttons and a
 * ready `tritonclient` snippet, and why the server failed with its last log lines.
 */

import { Clipboard } from '@jupyterlab/apputils';
import { checkIcon, copyIcon } from '@jupyterlab/ui-components';

import { IStatus } from './api';
import { button, element } from './dom';

/** Where the repository is for the Jupyter file browser and editor. */
export interface IRepositoryPlace {
  /** the repository's path relative to the Jupyter root; null when outside it */
  relative: string | null;
  /** what to tell the user when it is outside the root */
  note: string;
}

export class ServerView {
  readonly node = element('section', 'jp-TritonWorkbench-server');

  /** Redraw only when something shown changed (keeps selections and open details). */
  update(
    status: IStatus | null,
    proxyURL: string,
    place: IRepositoryPlace | null
  ): void {
    const key = JSON.stringify([status, proxyURL, place]);
    if (key === this._key) {
      return;
    }
    this._key = key;
    this.node.replaceChildren(
      ...(status ? render(status, proxyURL, place) : [])
    );
  }

  private _key = '';
}

function render(
  status: IStatus,
  proxyURL: string,
  place: IRepositoryPlace | null
): Node[] {
  const nodes: Node[] = [];
  if (status.state === 'failed' && status.reason) {
    nodes.push(
      element(
        'div',
        'jp-TritonWorkbench-error',
        { role: 'alert' },
        status.reason
      )
    );
  } else if (status.state === 'stopped') {
    nodes.push(
      element(
        'p',
        'jp-TritonWorkbench-muted',
        {},
        status.model_repository
          ? 'The model server is stopped. Start serves the repository below.'
          : 'No model repository is configured: set c.Workbench.model_repository or ' +
              'create model_repository/ under the Jupyter root.'
      )
    );
  }
  if (status.model_repository) {
    nodes.push(repositoryRow(status.model_repository, place));
  }
  const endpoints = status.endpoints;
  if (endpoints) {
    const list = element('dl', 'jp-TritonWorkbench-endpoints');
    list.append(
      ...endpointRow(
        'HTTP',
        endpoints.http_url,
        'the HTTP/REST endpoint on this machine'
      ),
      ...(endpoints.grpc_url
        ? endpointRow(
            'gRPC',
            endpoints.grpc_url,
            'the gRPC endpoint on this machine'
          )
        : []),
      ...(endpoints.metrics_url
        ? endpointRow('Metrics', endpoints.metrics_url, 'Prometheus metrics')
        : []),
      ...endpointRow(
        'Proxy',
        proxyURL,
        "the HTTP endpoint through Jupyter's login, for clients on other machines " +
          '(send the Jupyter token: workbench.jupyter.token_auth.JupyterToken)'
      )
    );
    nodes.push(
      list,
      snippetBlock(endpoints.http_address, endpoints.grpc_url, proxyURL)
    );
  }
  if (status.log_tail.length > 0 && status.state !== 'running') {
    const log = element('details', 'jp-TritonWorkbench-log');
    log.append(
      element('summary', '', {}, 'Server log'),
      element('pre', '', {}, status.log_tail.slice(-40).join('\n'))
    );
    nodes.push(log);
  }
  return nodes;
}

function repositoryRow(
  path: string,
  place: IRepositoryPlace | null
): HTMLElement {
  const row = element(
    'div',
    'jp-TritonWorkbench-repository',
    {},
    element('span', 'jp-TritonWorkbench-label', {}, 'Repository'),
    element(
      'code',
      'jp-TritonWorkbench-path',
      { title: path },
      ...breakable(path)
    )
  );
  if (place && place.relative === null) {
    row.append(
      element('div', 'jp-TritonWorkbench-warning', { role: 'note' }, place.note)
    );
  }
  return row;
}

function endpointRow(
  name: string,
  value: string,
  title: string
): HTMLElement[] {
  return [
    element('dt', '', { title }, name),
    element(
      'dd',
      '',
      {},
      element(
        'code',
        'jp-TritonWorkbench-url',
        { title: value },
        ...breakable(value.replace(/^https?:\/\//, ''))
      ),
      copyButton(`Copy the ${name} URL`, value)
    )
  ];
}

/** `text` with a line-break opportunity after each `/` and before each `:`. */
function breakable(text: string): Node[] {
  const nodes: Node[] = [];
  for (const part of text.split(/(?<=\/)|(?=:)/)) {
    if (nodes.length) {
      nodes.push(document.createElement('wbr'));
    }
    nodes.push(document.createTextNode(part));
  }
  return nodes;
}

function snippetBlock(
  httpAddress: string,
  grpcURL: string | null,
  proxyURL: string
): HTMLElement {
  return element(
    'div',
    'jp-TritonWorkbench-snippets',
    {},
    snippet(
      'tritonclient, on this machine',
      tritonclientSnippet(httpAddress, grpcURL)
    ),
    snippet('tritonclient, through Jupyter', proxySnippet(proxyURL))
  );
}

/** A snippet folded under its title, with a copy button that works folded too. */
function snippet(title: string, code: string): HTMLElement {
  return element(
    'details',
    'jp-TritonWorkbench-snippet',
    {},
    element(
      'summary',
      'jp-TritonWorkbench-snippetHead',
      {},
      element('span', 'jp-TritonWorkbench-snippetTitle', {}, title),
      copyButton(`Copy the code: ${title}`, code)
    ),
    element(
      'pre',
      '',
      {},
      ...code
        .split('\n')
        .map(line => element('span', 'jp-TritonWorkbench-codeLine', {}, line))
    )
  );
}

/** Client code for a kernel on the Jupyter machine (the server listens on loopback). */
export function tritonclientSnippet(
  httpAddress: string,
  grpcURL: string | null
): string {
  const lines = [
    'import tritonclient.http as httpclient',
    '',
    `client = httpclient.InferenceServerClient("${httpAddress}")`,
    'client.is_server_ready()'
  ];
  if (grpcURL) {
    lines.splice(1, 0, 'import tritonclient.grpc as grpcclient');
    lines.push(`grpc_client = grpcclient.InferenceServerClient("${grpcURL}")`);
  }
  return lines.join('\n');
}

/** Client code through the authenticated proxy (tritonclient takes no scheme). */
export function proxySnippet(proxyURL: string): string {
  const url = new URL(proxyURL);
  const address = `${url.host}${url.pathname.replace(/\/$/, '')}`;
  const ssl = url.protocol === 'https:' ? ', ssl=True' : '';
  return [
    'import tritonclient.http as httpclient',
    'from workbench.jupyter.token_auth import JupyterToken',
    '',
    `client = httpclient.InferenceServerClient("${address}"${ssl})`,
    'client.register_plugin(JupyterToken("<your Jupyter token>"))'
  ].join('\n');
}

/** Copies `text`; the icon turns into a check for a moment to say it was done. */
export function copyButton(label: string, text: string): HTMLButtonElement {
  const node = button({
    label,
    icon: copyIcon,
    iconOnly: true,
    className: 'jp-TritonWorkbench-copy',
    onClick: () => {
      Clipboard.copyToSystem(text);
      node.replaceChildren(
        checkIcon.element({
          tag: 'span',
          className: 'jp-TritonWorkbench-buttonIcon'
        })
      );
      node.classList.add('jp-mod-copied');
      window.setTimeout(() => {
        node.replaceChildren(
          copyIcon.element({
            tag: 'span',
            className: 'jp-TritonWorkbench-buttonIcon'
          })
        );
        node.classList.remove('jp-mod-copied');
      }, 1500);
    }
  });
  return node;
}
