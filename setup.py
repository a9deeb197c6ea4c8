"""Everything about the build is in pyproject.toml, except this one fix.

setuptools' editable wheels leave out ``data-files`` (pypa/setuptools#3399): ``editable_wheel``
installs the data category only when the distribution answers ``has_data()``, a method it
does not have. So ``pip install -e .`` never installed
``etc/jupyter/jupyter_server_config.d/workbench.json``, the file that enables the Jupyter
server extension (a regular wheel always did). This distribution class answers it.
"""

from setuptools import setup
from setuptools.dist import Distribution


class DistributionWithData(Distribution):
    def has_data(self) -> bool:
        return bool(self.has_data_files())


setup(distclass=DistributionWithData)
