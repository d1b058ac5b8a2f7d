// Serving profiles on the deployment request and edit forms (deployments/profiles.py).
// Choosing a profile asks the server for its values for the form as typed so far (the function
// behind GET /api/v1/serving-profiles/ too) and fills the fields it sets; every field stays
// editable. A field the user edits afterwards is theirs: it is kept when a change of hardware or
// model fills the profile again, and the request records the profile with their value.
// Without this script the form's "Apply profile" button does the same on the server.
(function () {
  const form = document.getElementById("deployment-form");
  const select = form && form.querySelector("[name=serving_profile]");
  const applied = form && form.querySelector("[name=profile_applied]");
  const notes = document.getElementById("profile-notes");
  if (!select || !applied || !notes || !form.dataset.profileUrl) return;
  // The script fills on change, so Enter in a field submits the request, not "Apply profile".
  const applyButton = form.querySelector("[name=apply_profile]");
  if (applyButton) applyButton.remove();
  // What the sizing depends on: a change refills the profile's fields the user has not edited.
  const inputs = ["tenant", "flavor", "backend", "model_source", "parameter_count_b", "max_model_len", "dtype",
    "gpu_memory_utilization"];
  const edited = new Set();
  let filled = {};

  function setField(name, value) {
    const input = form.querySelector(`[name="${name}"]`);
    if (!input) return;
    if (input.type === "checkbox") input.checked = Boolean(value);
    else input.value = value === null ? "" : String(value);
  }

  function shown(value) {
    if (value === null) return "vLLM default";
    return value === "" ? "none" : String(value);
  }

  function show(preset) {
    const head = document.createElement("p");
    head.textContent = `${preset.label} profile: ${preset.summary}.`;
    const list = document.createElement("ul");
    list.className = "list-tight";
    for (const [name, item] of Object.entries(preset.fields)) {
      const line = document.createElement("li");
      line.dataset.profileField = name;
      line.textContent = `${name} = ${shown(item.value)}: ${item.reason}`;
      if (edited.has(name)) line.textContent += " (your value kept)";
      list.append(line);
    }
    for (const note of preset.notes) {
      const line = document.createElement("li");
      line.textContent = note;
      list.append(line);
    }
    notes.replaceChildren(head, list);
  }

  async function fill() {
    const profile = select.value;
    if (!profile) {
      applied.value = "";
      filled = {};
      notes.replaceChildren();
      return;
    }
    let body;
    let ok = false;
    try {
      const response = await fetch(form.dataset.profileUrl, {
        method: "POST", body: new FormData(form), credentials: "same-origin",
      });
      body = await response.json();
      ok = response.ok;
    } catch (error) {
      body = {};
    }
    if (select.value !== profile) return; // chosen again meanwhile: that answer counts
    if (!ok || body.error) {
      notes.textContent = body.error || "The profile could not be loaded; use the fields directly.";
      return;
    }
    filled = body.fields;
    for (const [name, item] of Object.entries(body.fields)) {
      if (!edited.has(name)) setField(name, item.value);
    }
    applied.value = profile;
    show(body);
    form.dispatchEvent(new Event("change", {bubbles: true})); // the live fit preview (htmx) refreshes
  }

  function userEdit(event) {
    const name = event.target.name;
    if (!event.isTrusted || !name) return;
    if (name in filled && applied.value) {
      edited.add(name);
      const line = notes.querySelector(`[data-profile-field="${name}"]`);
      if (line && !line.textContent.endsWith("(your value kept)")) line.textContent += " (your value kept)";
    } else if (inputs.includes(name) && event.type === "change" && select.value) {
      fill();
    }
  }

  select.addEventListener("change", () => {
    edited.clear();
    fill();
  });
  form.addEventListener("input", userEdit);
  form.addEventListener("change", userEdit);
})();
