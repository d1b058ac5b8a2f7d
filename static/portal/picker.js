// The request form's model picker (deployments/picker.py): picking a card fills the model source,
// revision and task from the card, the values the server takes from `catalog_model` (catalog.drafts),
// so what will run is in view before the request is sent. Picking "Your own source" again puts
// back what the fields held before, unless they were edited since. The filters swap the cards
// (htmx), so the form listens rather than each card. Without this script each card's
// "Use <model>" link opens the form with the card chosen and both fields filled in.
(function () {
  const form = document.getElementById("deployment-form");
  const source = form && form.querySelector("[name=model_source]");
  const revision = form && form.querySelector("[name=model_revision]");
  const task = form && form.querySelector("[name=task]");
  if (!source || !revision) return;
  let before = null; // the fields as they were before the first card was picked
  let filled = null; // what the last card put in

  function set(values) {
    source.value = values.source;
    revision.value = values.revision;
    if (task) task.value = values.task;
  }

  const checked = form.querySelector("[name=catalog_model]:checked");
  if (checked && checked.value && source.value === checked.dataset.source) {
    filled = { source: checked.dataset.source, revision: checked.dataset.revision || "", task: checked.dataset.task || "" };
    before = { source: "", revision: "", task: "" };
  }

  form.addEventListener("change", (event) => {
    const radio = event.target;
    if (radio.name !== "catalog_model") return;
    const untouched = filled && source.value === filled.source && revision.value === filled.revision;
    if (radio.value) {
      if (!untouched) before = { source: source.value, revision: revision.value, task: task ? task.value : "" };
      filled = { source: radio.dataset.source || "", revision: radio.dataset.revision || "", task: radio.dataset.task || "" };
      set(filled);
    } else if (untouched) {
      set(before);
      filled = null;
    }
  });
})();
