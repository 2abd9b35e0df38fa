/* onnx-gather: the tables of a report page. A click on a column's head sorts the rows by it (again: the other way),
   numbers as numbers; the filter above a table keeps the rows that hold its text; a click on a row of the nodes'
   table shows its session node on the picture. */
(function () {
  "use strict";

  function value(row, column) {
    const text = row.cells[column] ? row.cells[column].textContent : "";
    const number = Number(text);
    return text !== "" && !Number.isNaN(number) ? number : text.toLowerCase();
  }

  function sortable(table) {
    const heads = Array.from(table.tHead.rows[0].cells);
    heads.forEach(function (head, column) {
      head.tabIndex = 0;
      head.title = "sort by " + head.textContent;
      const sort = function () {
        const body = table.tBodies[0];
        const rising = head.getAttribute("aria-sort") !== "ascending";
        heads.forEach(function (other) { other.removeAttribute("aria-sort"); });
        head.setAttribute("aria-sort", rising ? "ascending" : "descending");
        const rows = Array.from(body.rows).map(function (row, i) { return [value(row, column), i, row]; });
        rows.sort(function (a, b) {
          const order = typeof a[0] === typeof b[0] ? (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0) :
            typeof a[0] === "number" ? -1 : 1;
          return (rising ? order : -order) || a[1] - b[1];
        });
        const sorted = document.createDocumentFragment();
        for (const row of rows) sorted.appendChild(row[2]);
        body.appendChild(sorted);
      };
      head.addEventListener("click", sort);
      head.addEventListener("keydown", function (event) { if (event.key === "Enter") sort(); });
    });
  }

  document.querySelectorAll("table.sortable").forEach(sortable);

  document.querySelectorAll("input.filter").forEach(function (input) {
    const table = input.parentElement.querySelector("table");
    let timer = 0;
    input.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        const query = input.value.trim().toLowerCase();
        for (const row of table.tBodies[0].rows) {
          row.hidden = query !== "" && !row.textContent.toLowerCase().includes(query);
        }
      }, 150);
    });
  });

  const nodes = document.getElementById("nodes-table");
  if (nodes) {
    const columns = Array.from(nodes.tHead.rows[0].cells).map(function (cell) { return cell.textContent; });
    const graph = columns.indexOf("graph");
    const name = columns.indexOf("node");
    const session = columns.indexOf("session node");
    nodes.tBodies[0].addEventListener("click", function (event) {
      const row = event.target.closest("tr");
      if (!row) return;
      const shown = row.cells[session].textContent || row.cells[name].textContent;
      document.dispatchEvent(new CustomEvent("onnx-gather-focus", {
        detail: { graph: row.cells[graph].textContent, name: shown },
      }));
    });
  }
})();
