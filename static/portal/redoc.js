// Start Redoc on the API docs page without inline script (Content-Security-Policy). The page's
// nonce reaches Redoc through this script element's nonce property, and Redoc sets it on the
// <style> elements it injects; the settings are SPECTACULAR_SETTINGS["REDOC_UI_SETTINGS"].
(function () {
  const container = document.getElementById("redoc-container");
  const source = document.getElementById("redoc-settings");
  let settings = source ? JSON.parse(source.textContent) : {};
  if (typeof settings === "string") settings = JSON.parse(settings);
  const nonce = document.currentScript && document.currentScript.nonce;
  Redoc.init(container.dataset.specUrl, {...settings, ...(nonce ? {nonce} : {})}, container);
})();
