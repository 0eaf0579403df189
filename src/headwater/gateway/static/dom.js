// The one way the page's scripts build elements (app.js, inspect.js).

/** `<tag>` with `attrs` (`class`; `on<event>` handlers; `true` as an empty attribute; null,
 *  undefined and false left out) and `children` (nodes or text; null and undefined left out). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}
