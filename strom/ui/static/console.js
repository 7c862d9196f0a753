// Rate and lag charts: each <canvas data-series="KEY"> shows /api/history?key=KEY and refreshes itself.
(function () {
  "use strict";
  var REFRESH_MS = 5000;
  function label(ms) { return new Date(ms).toLocaleTimeString(); }
  function draw(canvas) {
    var key = canvas.getAttribute("data-series");
    var chart = new Chart(canvas, {
      type: "line",
      data: { labels: [], datasets: [{ label: canvas.getAttribute("data-label") || key, data: [],
                                       borderColor: "#2563eb", pointRadius: 0, tension: 0.2 }] },
      options: { animation: false, maintainAspectRatio: false, scales: { y: { beginAtZero: true } } }
    });
    function refresh() {
      fetch("/api/history?key=" + encodeURIComponent(key))
        .then(function (r) { return r.ok ? r.json() : { points: [] }; })
        .then(function (body) {
          chart.data.labels = body.points.map(function (p) { return label(p[0]); });
          chart.data.datasets[0].data = body.points.map(function (p) { return p[1]; });
          chart.update();
          canvas.setAttribute("data-points", String(body.points.length));
        })
        .catch(function () { /* the next refresh tries again */ });
    }
    refresh();
    setInterval(refresh, REFRESH_MS);
  }
  document.querySelectorAll("canvas[data-series]").forEach(draw);
  document.querySelectorAll("td[data-ms]").forEach(function (td) {
    var ms = Number(td.getAttribute("data-ms"));
    if (ms > 0) { td.textContent = new Date(ms).toISOString(); }
  });
})();
