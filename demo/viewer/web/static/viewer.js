// Loads the Broadside viewer (Go compiled to WebAssembly) and hands it a
// recording the user picks. The viewer itself decides what to open (see
// cmd/broadside-viewer/main_js.go).
"use strict";
(function () {
  const status = document.getElementById("status");
  document.getElementById("file").addEventListener("change", async (ev) => {
    const f = ev.target.files[0];
    if (!f || !window.broadsideOpenFile) return;
    status.textContent = "reading " + f.name + " ...";
    const buf = new Uint8Array(await f.arrayBuffer());
    window.broadsideOpenFile(f.name, buf);
  });
  if (!window.WebAssembly || !window.WebGL2RenderingContext) {
    status.textContent = "this browser lacks WebAssembly or WebGL 2, which the viewer needs";
    return;
  }
  const go = new Go();
  WebAssembly.instantiateStreaming(fetch("viewer.wasm"), go.importObject)
    .then((r) => go.run(r.instance))
    .catch((e) => { status.textContent = "could not start the viewer: " + e; });
})();
