"""The page's own CSS: what every tab's tables, labels and plots share, and the header's layout on a phone. Each
tab brings the CSS of its own elements (``Tab.css``), added after this."""

PAGE_CSS = """
.rloo-error p, .rloo-error li { color: #D9534F; }
.rloo-small p { font-size: 0.85em; opacity: 0.8; }
.rloo-group { margin: 0 0 14px 0; }
.rloo-prompt { margin: 4px 0; }
.rloo-table { border-collapse: collapse; width: 100%; font-size: 0.88em; }
.rloo-table th, .rloo-table td { padding: 3px 6px; border-bottom: 1px solid rgba(128,128,128,0.25); text-align: right; }
.rloo-table td.rloo-text { text-align: left; white-space: normal; }
.rloo-table th:nth-child(2) { text-align: left; }
/* every table: a number on one line, a header broken only between words (gradio's text styles break anywhere:
   "-0.⏎45⏎4", "rlo⏎o"); a table wider than its box scrolls inside it rather than past the page's edge */
.rloo-table th { white-space: normal; word-break: normal; overflow-wrap: normal; hyphens: manual;
  vertical-align: bottom; }
.rloo-table td.rloo-num, .rloo-table td.rloo-idx { white-space: nowrap; font-variant-numeric: tabular-nums; }
.rloo-table-box { overflow-x: auto; max-width: 100%; }
.rloo-cap { display: none; }
/* (no selector lists inside :is() in this stylesheet: gradio scopes each comma-separated part of a rule, those
   inside :is() too, which changes what the rule weighs against the others) */
/* the tables written in Markdown (the what-if, the toy's, the arena's): the same rules, each its own scroll box
   whose first column stays in sight */
.rloo-md-table table { display: block; max-width: 100%; overflow-x: auto; border: 0; }
.rloo-md-table th, .rloo-md-table td { font-size: 0.85em; padding: 4px 7px; }
.rloo-md-table th { white-space: normal; word-break: normal; overflow-wrap: normal; hyphens: manual;
  vertical-align: bottom; }
.rloo-md-table td { white-space: nowrap; word-break: normal; overflow-wrap: normal;
  font-variant-numeric: tabular-nums; }
.rloo-md-table th:first-child, .rloo-md-table td:first-child { position: sticky; left: 0; z-index: 1;
  background: var(--background-fill-primary); }
/* a run picker's choice longer than its box (a label and a name, on a phone) ends in an ellipsis, not under the
   arrow; the list shows each whole */
#rollout-run input, #compare-run input, #runs-detail input { text-overflow: ellipsis; }
.rloo-empty { opacity: 0.7; }
td.rloo-pos { background: rgba(61, 190, 139, 0.18); }
td.rloo-neg { background: rgba(217, 83, 79, 0.18); }
.rloo-small-num { font-weight: normal; font-size: 0.85em; opacity: 0.8; }
/* labels wrap between words, never inside one ("K completi⏎ons"); a column too narrow for a word is widened instead
   (on a phone a row's items wrap, below) */
[data-testid="block-info"], .label-wrap span, label span { overflow-wrap: normal; word-break: normal; hyphens: auto; }
/* plotly's toolbar only while the pointer (or a tap) is on the plot: at rest it sat over the plot's title */
.js-plotly-plot .modebar-container { opacity: 0; transition: opacity 0.15s; }
.js-plotly-plot:hover .modebar-container, .js-plotly-plot:focus-within .modebar-container { opacity: 1; }
/* a phone: the header's text takes the whole width, the language selector goes under it, small */
@media (max-width: 700px) {
  #header-row { flex-direction: column; gap: 4px; }
  #header-row > * { width: 100%; min-width: 0 !important; }
  #app-header p { font-size: 0.9em; }
  #language [data-testid="block-info"] + span, #language .info { display: none; }
  /* a row's inputs wrap to the next line rather than shrink below their label's longest word ("вес: классификатор") */
  .form { flex-wrap: wrap !important; }
  .form > .block { min-width: min(140px, 100%) !important; }
  /* a slider's label above its number box, the whole width: beside it, it broke letter by letter ("Sa/mpl/es") */
  .head:has(+ .slider_input_container) { flex-wrap: wrap; }
  .head:has(+ .slider_input_container) > label { flex: 1 1 100%; }
  /* tables scroll sideways inside their box, the first column (a run's name) staying in sight */
  .table-wrap, .virtual-table-viewport { overflow-x: auto !important; }
  .table-wrap th .header-content span { white-space: nowrap; }
  /* the header's first cell, and the body's: gradio draws the body as rows of divs outside its <table>, and its
     pinned_columns (set on the Runs table) marks the column without making it stay */
  .table-wrap th:first-child, .table-wrap .virtual-row .body-cell.first-column {
    position: sticky; left: 0; z-index: 2; background: var(--background-fill-primary); }
}
"""
