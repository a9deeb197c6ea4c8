/** The panel's icon: a trident, themed through `jp-icon3`. */

import { LabIcon } from '@jupyterlab/ui-components';

import svg from '../style/icon.svg';

export const workbenchIcon = new LabIcon({
  name: 'triton-workbench:trident',
  svgstr: svg
});
