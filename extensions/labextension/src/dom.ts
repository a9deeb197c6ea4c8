/**
 * Building the panel's DOM: one small element factory and the buttons it uses, so views
 * read as the structure they make.
 */

import { LabIcon } from '@jupyterlab/ui-components';

type Child = Node | string | null | undefined | false;

/** `<tag class=...>children</tag>`; attributes are set as given (`title`, `aria-*`, ...). */
export function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className = '',
  attributes: { [name: string]: string } = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  for (const [name, value] of Object.entries(attributes)) {
    node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child) {
      node.append(child);
    }
  }
  return node;
}

export interface IButtonOptions {
  label: string;
  /** the tooltip; the label when absent */
  title?: string;
  icon?: LabIcon;
  /** show only the icon (the label stays the accessible name) */
  iconOnly?: boolean;
  className?: string;
  onClick: () => void;
}

/** A themed button: icon and label, or only an icon with the label as its name. */
export function button(options: IButtonOptions): HTMLButtonElement {
  const node = element(
    'button',
    `jp-TritonWorkbench-button ${options.className ?? ''}`.trim(),
    { type: 'button', title: options.title ?? options.label }
  );
  if (options.icon) {
    node.append(
      options.icon.element({
        tag: 'span',
        className: 'jp-TritonWorkbench-buttonIcon'
      })
    );
  }
  if (options.iconOnly) {
    node.setAttribute('aria-label', options.label);
  } else {
    node.append(
      element('span', 'jp-TritonWorkbench-buttonLabel', {}, options.label)
    );
  }
  node.addEventListener('click', event => {
    // inside a <summary> (a snippet's copy button) a click would also fold or unfold it
    event.preventDefault();
    event.stopPropagation();
    options.onClick();
  });
  return node;
}
