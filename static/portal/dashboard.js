// Deployment dashboard: fetch the server-built Plotly figures for a window, redraw in place
// every 15 s and when the range changes (no page reload). Started by the page's
// <div id="charts" data-charts-url="…" data-plotly-src="…">: no inline script (Content-Security-Policy).
// plotly.js is the page's heaviest file by far; it is fetched only once there are points to plot,
// so the page paints at once and a deployment without metrics never downloads it.
let plotlyLoading = null;
function loadPlotly(src) {
  if (window.Plotly) return Promise.resolve();
  if (!plotlyLoading) {
    plotlyLoading = new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = src;
      script.onload = resolve;
      script.onerror = () => { plotlyLoading = null; reject(new Error("plotly.js did not load")); };
      document.head.appendChild(script);
    });
  }
  return plotlyLoading;
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function portalDashboard(charts) {
  let current = "1h";
  const note = document.getElementById("chart-note");
  async function draw() {
    let figures;
    try {
      const url = new URL(charts.dataset.chartsUrl, document.baseURI);
      url.searchParams.set("window", current);
      const response = await fetch(url, {credentials: "same-origin"});
      if (!response.ok) throw new Error(String(response.status));
      figures = await response.json();
    } catch (error) {
      note.textContent = "Metrics are unavailable right now; retrying every 15 s.";
      return;
    }
    const meta = figures._meta;
    // Running requests and KV-cache use are gauges read at each scrape: a point of a coarser
    // window is the mean of its samples, drawn with their peak (metrics.aggregate.PEAKS).
    const peaks = meta.resolution_s > 15 ? " Running requests and KV cache: the mean of each interval's 15 s samples and their peak." : "";
    note.textContent = meta.points ? `${plural(meta.points, "point")} at ${meta.resolution_s} s resolution.${peaks}`
                                   : `No metrics in the last ${current}: samples appear once the deployment serves.`;
    // Empty plots would only fill the page with blank axes.
    charts.hidden = !meta.points;
    if (!meta.points) return;
    try {
      await loadPlotly(charts.dataset.plotlySrc);
    } catch (error) {
      note.textContent = "The chart library did not load; retrying every 15 s.";
      return;
    }
    for (const [name, fig] of Object.entries(figures)) {
      if (name === "_meta") continue;
      const el = document.getElementById(`chart-${name}`);
      if (!el) continue;
      // A chart with nothing this deployment reports (replicas of an engine without Ray Serve) is left out.
      el.closest("figure").hidden = !fig.data.length;
      if (!fig.data.length) continue;
      // The title goes into the HTML caption (a real heading for screen readers), which also
      // leaves the top margin to the legend instead of the two overlapping.
      const layout = {...fig.layout};
      const caption = document.getElementById(`cap-${name}`);
      if (caption && layout.title && layout.title.text) caption.textContent = layout.title.text;
      layout.title = {text: ""};
      layout.margin = {...(layout.margin || {}), t: 28};
      layout.height = 250;
      Plotly.react(el, fig.data, layout, {responsive: true, displaylogo: false});
      // Let the browser paint this chart before drawing the next: the first shows up at once.
      await new Promise((resolve) => setTimeout(resolve, 0));
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
if (chartsElement && chartsElement.dataset.chartsUrl) portalDashboard(chartsElement);
