// Deployment dashboard: fetch the server-built Plotly figures for a window, redraw in place
// every 15 s and when the range changes (no page reload).
function portalDashboard(deploymentId) {
  let current = "1h";
  const note = document.getElementById("chart-note");
  async function draw() {
    const response = await fetch(`/deployments/${deploymentId}/charts/?window=${current}`,
                                 {credentials: "same-origin"});
    if (!response.ok) { note.textContent = "Metrics are unavailable right now."; return; }
    const figures = await response.json();
    const meta = figures._meta;
    note.textContent = meta.points ? `${meta.points} points at ${meta.resolution_s} s resolution.`
                                   : "No metrics yet: samples appear once the deployment serves.";
    for (const [name, fig] of Object.entries(figures)) {
      if (name === "_meta") continue;
      const el = document.getElementById(`chart-${name}`);
      if (el) Plotly.react(el, fig.data, fig.layout, {responsive: true, displaylogo: false});
    }
  }
  document.querySelectorAll("[data-window]").forEach((link) => {
    link.addEventListener("click", (event) => {
      event.preventDefault();
      current = link.dataset.window;
      document.querySelectorAll("[data-window]").forEach((l) => l.setAttribute("aria-current", String(l === link)));
      draw();
    });
  });
  draw();
  setInterval(draw, 15000);
}
