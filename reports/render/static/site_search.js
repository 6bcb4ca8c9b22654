(function () {
  "use strict";
  var box = document.getElementById("model-search");
  var count = document.getElementById("search-count");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#models tbody tr[data-search]"));
  function apply() {
    var words = box.value.toLowerCase().split(/\s+/).filter(Boolean);
    var shown = 0;
    rows.forEach(function (row) {
      var text = row.getAttribute("data-search");
      var hit = words.every(function (w) { return text.indexOf(w) !== -1; });
      row.hidden = !hit;
      if (hit) { shown += 1; }
    });
    count.textContent = words.length ? shown + " of " + rows.length + " models" : "";
  }
  var asked = new URLSearchParams(window.location.search).get("q");
  if (asked) { box.value = asked; }
  box.addEventListener("input", apply);
  box.form.addEventListener("submit", function (e) { e.preventDefault(); apply(); });
  apply();
})();
