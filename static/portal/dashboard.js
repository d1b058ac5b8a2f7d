// Deployment dashboard: fetch the server-built Plotly figures for a window, redraw in place
// every 15 s and when the range changes (no page reload). Started by the page's
// <div id="charts" data-charts-url="…">: no inline script (Content-Security-Policy).
function portalDashboard(chartsUrl) {
  let current = "1h";
  const note = document.getElementById("chart-note");
  const charts = document.getElementById("charts");
  async function draw() {
    let figures;
    try {
      const url = new URL(chartsUrl, document.baseURI);
      url.searchParams.set("window", current);
      const response = await fetch(url, {credentials: "same-origin"});
      if (!response.ok) throw new Error(String(response.status));
      figures = await response.json();
    } catch (error) {
      note.textContent = "Metrics are unavailable right now; retrying every 15 s.";
      return;
    }
    const meta = figures._meta;
    note.textContent = meta.points ? `${meta.points} points at ${meta.resolution_s} s resolution.`
                                   : `No metrics in the last ${current}: samples appear once the deployment serves.`;
    // Empty plots would only fill the page with blank axes.
    charts.hidden = !meta.points;
    if (!meta.points) return;
    for (const [name, fig] of Object.entries(figures)) {
      if (name === "_meta") continue;
      const el = document.getElementById(`chart-${name}`);
      if (!el) continue;
      // The title goes into the HTML caption (a real heading for screen readers), which also
      // leaves the top margin to the legend instead of the two overlapping.
      const layout = {...fig.layout};
      const caption = document.getElementById(`cap-${name}`);
      if (caption && layout.title && layout.title.text) caption.textContent = layout.title.text;
      layout.title = {text: ""};
      layout.margin = {...(layout.margin || {}), t: 28};
      layout.height = 250;
      Plotly.react(el, fig.data, layout, {responsive: true, displaylogo: false});
    }
  }
  document.querySelectorAll("[data-window]").forEach((button) => {
    button.addEventListener("click", () => {
      current = button.dataset.window;
      document.querySelectorAll("[data-window]").forEach((b) => b.setAttribute("aria-pressed", String(b === button)));
      draw();
    });
  });
  draw();
  setInterval(draw, 15000);
}

const chartsElement = document.getElementById("charts");
if (chartsElement && chartsElement.dataset.chartsUrl) portalDashboard(chartsElement.dataset.chartsUrl);
