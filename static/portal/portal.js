// Behaviour every page shares, bound here instead of in inline handlers (Content-Security-Policy).
// Listeners sit on the document, so buttons that htmx swaps in later behave the same.

// <button data-copy="element-id">: put that element's text on the clipboard and say so.
// navigator.clipboard needs a secure context (https, or http on localhost); elsewhere the
// text is selected and copied with the older execCommand.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source) return;
  const status = document.getElementById("copy-status");
  let copied = false;
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(source.textContent);
      copied = true;
    }
  } catch (error) {
    copied = false;
  }
  if (!copied) {
    const range = document.createRange();
    range.selectNodeContents(source);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    copied = document.execCommand("copy");
  }
  button.textContent = copied ? "Copied" : "Copy";
  if (status) status.textContent = copied ? "Copied to the clipboard." : "Select the text and copy it.";
  setTimeout(() => { button.textContent = "Copy"; }, 2000);
});

// <form data-prefill="ID" [data-prefill-prefix="P"]>: choosing a flavor fills the number fields
// with that flavor's current values from the JSON in element ID, so a request changes only what
// the admin edits (a new nominal no longer silently asked for a borrowing limit of 0). P is the
// Django form prefix of the fields' names, where the page holds several forms.
function prefillFromCurrent(form) {
  const source = document.getElementById(form.dataset.prefill);
  const prefix = form.dataset.prefillPrefix || "";
  const flavor = form.querySelector(`[name="${prefix}flavor"]`);
  if (!source || !flavor) return;
  const current = JSON.parse(source.textContent);
  const fill = () => {
    const values = current[flavor.value];
    if (!values) return;
    for (const [name, value] of Object.entries(values)) {
      const input = form.querySelector(`[name="${prefix}${name}"]`);
      if (input) input.value = value === null ? "" : String(value);
    }
  };
  flavor.addEventListener("change", fill);
  // A form sent back with errors keeps what was typed; a fresh one starts from the current values.
  if (!form.querySelector(".error, .errorlist")) fill();
}
document.querySelectorAll("form[data-prefill]").forEach(prefillFromCurrent);

// A region that scrolls sideways (a wide table, a manifest) must be reachable with the keyboard:
// each one that overflows gets a tab stop, also when htmx swaps one in.
function focusableScrollers(root) {
  root.querySelectorAll(".table-wrap, pre").forEach((el) => {
    const scrolls = el.scrollWidth > el.clientWidth + 1 || el.scrollHeight > el.clientHeight + 1;
    if (scrolls && !el.hasAttribute("tabindex")) el.tabIndex = 0;
  });
}
focusableScrollers(document);
document.addEventListener("htmx:afterSwap", (event) => focusableScrollers(event.detail.elt.parentElement || document));
window.addEventListener("resize", () => focusableScrollers(document));
