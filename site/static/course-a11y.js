// Mends for the theme's own markup, so that a screen reader or the keyboard gets a name for every
// control (tests/test_site.py runs axe-core on every page of the site).
document.addEventListener("DOMContentLoaded", () => {
  // The sidebar's expand toggles are a <summary> with only an icon: say what each one opens.
  document.querySelectorAll("nav details > summary").forEach((summary) => {
    if (summary.textContent.trim() || summary.getAttribute("aria-label")) return;
    const link = summary.parentElement.parentElement.querySelector(":scope > a");
    summary.setAttribute("aria-label", `Show the pages under ${link ? link.textContent.trim() : "this entry"}`);
  });
  // The search buttons show "Search" and a shortcut, but are named "Search" alone: let what they
  // show name them.
  document.querySelectorAll("button.search-button__button[aria-label]").forEach((button) => {
    button.removeAttribute("aria-label");
  });
});
