// Plot server-built Plotly figures: <div data-figure="ID"> draws the figure held in the
// {{ figure|json_script:"ID" }} element (JSON data, never executed), so pages need no inline script
// under the Content-Security-Policy.
document.querySelectorAll("[data-figure]").forEach((element) => {
  const source = document.getElementById(element.dataset.figure);
  if (!source) return;
  let figure = JSON.parse(source.textContent);
  // Views pass plotly's own JSON (fig.to_json()), which json_script wraps once more as a string.
  if (typeof figure === "string") figure = JSON.parse(figure);
  Plotly.newPlot(element, figure.data, figure.layout, {responsive: true, displaylogo: false});
});
