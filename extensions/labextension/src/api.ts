/**
 * The server extension's REST API (`<base_url>/workbench/api/`), typed.
 *
 * Every request goes through `ServerConnection.makeRequest`, which adds the Jupyter token
 * and the XSRF header, so the routes' own authentication and authorization apply. The
 * shapes below mirror `workbench/jupyter/handlers.py` and `workbench/jupyter/stats.py`.
 */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

export type ServerState =
  'stopped' | 'starting' | 'running' | 'stopping' | 'failed';

export interface IEndpoints {
  http_url: string;
  http_address: string;
  grpc_url: string | null;
  metrics_url: string | null;
  pid: number;
}

export interface IStatus {
  state: ServerState;
  reason: string;
  engine: string;
  model_repository: string | null;
  endpoints: IEndpoints | null;
  version: string;
  server_version: string;
  started: string;
  log_tail: string[];
  /** `<base_url>workbench`: the authenticated proxy (`/v2/...` below it) */
  proxy_path: string;
}

/** One row of the repository index: Triton's `state` is `READY`, `UNAVAILABLE`, ... */
export interface IModel {
  name: string;
  version: string;
  state: string;
  reason: string;
}

/** A config problem; `line` is the line of the text it is about (null: no line). */
export interface IProblem {
  field: string;
  message: string;
  line: number | null;
}

export interface IValidation {
  valid: boolean;
  problems: IProblem[];
}

export interface IModelConfig {
  name: string;
  path: string;
  pbtxt: string;
  config: { [key: string]: unknown } | null;
  problems: IProblem[];
}

/** One interval of one model version; durations in microseconds per request. */
export interface ISample {
  time: number;
  requests_per_s: number;
  success: number;
  fail: number;
  latency_us: number | null;
  queue_us: number | null;
  compute_us: number | null;
  p99_us: number | null;
}

export interface IModelStats {
  name: string;
  version: string;
  latest: ISample | null;
  samples: ISample[];
}

export interface IStats {
  interval_s: number;
  models: IModelStats[];
}

/** A refused request: the route's message, its HTTP status and a config's problems. */
export class WorkbenchAPIError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly problems: IProblem[] = []
  ) {
    super(message);
  }
}

/** The routes, one method each. */
export class WorkbenchAPI {
  constructor(
    readonly settings: ServerConnection.ISettings = ServerConnection.makeSettings()
  ) {}

  status(): Promise<IStatus> {
    return this._request('status');
  }

  start(): Promise<IStatus> {
    return this._request('server/start', { method: 'POST' });
  }

  stop(): Promise<IStatus> {
    return this._request('server/stop', { method: 'POST' });
  }

  async models(): Promise<IModel[]> {
    const reply = await this._request<{ models: IModel[] }>('models');
    return reply.models;
  }

  /** Load `name`, or reload it when it is loaded; the model's rows afterwards. */
  async load(name: string): Promise<IModel[]> {
    return this._modelAction(name, 'load');
  }

  async unload(name: string): Promise<IModel[]> {
    return this._modelAction(name, 'unload');
  }

  config(name: string): Promise<IModelConfig> {
    return this._request(`models/${encodeURIComponent(name)}/config`);
  }

  validate(name: string, pbtxt: string): Promise<IValidation> {
    return this._request(`models/${encodeURIComponent(name)}/config/validate`, {
      method: 'POST',
      body: JSON.stringify({ pbtxt })
    });
  }

  stats(): Promise<IStats> {
    return this._request('stats');
  }

  /** The proxy's absolute URL, e.g. `http://host:8888/workbench`. */
  proxyURL(status: IStatus): string {
    return URLExt.join(pageOrigin(this.settings.baseUrl), status.proxy_path);
  }

  private async _modelAction(name: string, action: string): Promise<IModel[]> {
    const path = `models/${encodeURIComponent(name)}/${action}`;
    const reply = await this._request<{ models: IModel[] }>(path, {
      method: 'POST'
    });
    return reply.models;
  }

  private async _request<T>(path: string, init: RequestInit = {}): Promise<T> {
    const url = URLExt.join(this.settings.baseUrl, 'workbench', 'api', path);
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(url, init, this.settings);
    } catch (error) {
      throw new ServerConnection.NetworkError(error as TypeError);
    }
    const text = await response.text();
    let body: any = {};
    try {
      body = text ? JSON.parse(text) : {};
    } catch {
      body = { message: text };
    }
    if (!response.ok) {
      const message = body.message || response.statusText || 'request failed';
      throw new WorkbenchAPIError(
        message,
        response.status,
        body.problems ?? []
      );
    }
    return body as T;
  }
}

/** The origin Jupyter answers at (its base URL may itself be absolute). */
function pageOrigin(baseUrl: string): string {
  return new URL(baseUrl, window.location.href).origin;
}
