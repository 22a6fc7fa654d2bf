// Sorts a table.sortable by the clicked column: numbers by data-sort, text by its content.
// The table is complete without this script.
(function () {
  "use strict";
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.querySelectorAll("thead th");
    heads.forEach(function (th, col) {
      var button = th.querySelector("button");
      if (!button) { return; }
      button.addEventListener("click", function () {
        var ascending = th.getAttribute("aria-sort") !== "ascending";
        heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        var numeric = th.classList.contains("num");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var key = function (row) {
          var cell = row.cells[col];
          if (!cell) { return numeric ? -Infinity : ""; }
          var k = cell.getAttribute("data-sort");
          if (k === null) { k = cell.textContent; }
          if (numeric) { var v = parseFloat(k); return isNaN(v) ? -Infinity : v; }
          return k;
        };
        rows.sort(function (a, b) {
          var x = key(a), y = key(b);
          var c = numeric ? (x < y ? -1 : x > y ? 1 : 0) : String(x).localeCompare(String(y));
          return ascending ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
