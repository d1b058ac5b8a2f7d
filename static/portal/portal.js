// Behaviour every page shares, bound here instead of in inline handlers (Content-Security-Policy).
// Listeners sit on the document, so buttons that htmx swaps in later behave the same.

// <button data-confirm="Delete x?">: ask before the form is submitted.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-confirm]");
  if (button && !window.confirm(button.dataset.confirm)) event.preventDefault();
});
