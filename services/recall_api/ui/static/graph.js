// The entity graph can be panned: drag it (mouse, pen or touch), or focus it and use the arrow keys;
// Home (or a double click) puts it back. Only the SVG's viewBox moves: the server's layout is kept.
"use strict";
(function () {
  const svg = document.getElementById("entity-graph");
  if (!svg) return;
  const home = svg.viewBox.baseVal;
  const origin = { x: home.x, y: home.y, width: home.width, height: home.height };
  const KEY_STEP = 40;
  let drag = null;

  function moveTo(x, y) {
    svg.setAttribute("viewBox", [x, y, origin.width, origin.height].join(" "));
    svg.dataset.panned = x !== origin.x || y !== origin.y ? "true" : "false";
  }

  function unitsPerPixel() {
    const box = svg.getBoundingClientRect();
    return box.width > 0 ? origin.width / box.width : 1;
  }

  svg.addEventListener("pointerdown", (event) => {
    if (event.button !== 0) return;
    const box = svg.viewBox.baseVal;
    drag = { id: event.pointerId, startX: event.clientX, startY: event.clientY, x: box.x, y: box.y };
    svg.setPointerCapture(event.pointerId);
    svg.classList.add("dragging");
  });
  svg.addEventListener("pointermove", (event) => {
    if (!drag || event.pointerId !== drag.id) return;
    const scale = unitsPerPixel();
    moveTo(drag.x - (event.clientX - drag.startX) * scale, drag.y - (event.clientY - drag.startY) * scale);
  });
  function endDrag(event) {
    if (!drag || event.pointerId !== drag.id) return;
    drag = null;
    svg.classList.remove("dragging");
  }
  svg.addEventListener("pointerup", endDrag);
  svg.addEventListener("pointercancel", endDrag);
  svg.addEventListener("dblclick", () => moveTo(origin.x, origin.y));

  const STEPS = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] };
  svg.addEventListener("keydown", (event) => {
    const box = svg.viewBox.baseVal;
    if (event.key === "Home") {
      moveTo(origin.x, origin.y);
    } else if (STEPS[event.key]) {
      const [dx, dy] = STEPS[event.key];
      moveTo(box.x + dx * KEY_STEP, box.y + dy * KEY_STEP);
    } else {
      return;
    }
    event.preventDefault();
  });
})();
