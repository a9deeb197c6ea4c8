// SVG files are bundled as strings (JupyterLab's builder loads *.svg as source text).
declare module '*.svg' {
  const value: string;
  export default value;
}
