"""The Train tab's CSS and the action bar's toggle: the callout, the summary, the action bar that stays in sight
(``BAR_CSS``, ``STICKY_CSS``) and the button that folds it on a phone (``TOGGLE_HTML``, ``TOGGLE_JS``)."""

# The callout, the summary and the action bar (``BAR_CSS``).
TRAIN_CSS = """
.rloo-callouts { display: flex; flex-direction: column; gap: 6px; margin: 4px 0; }
.rloo-callout { display: flex; gap: 10px; align-items: flex-start; padding: 8px 12px; border-radius: 6px;
  border: 1px solid #E8A33D; border-left: 6px solid #E8A33D; background: rgba(232, 163, 61, 0.14); }
.rloo-callout-icon { font-size: 1.3em; line-height: 1.2; color: #C47F17; }
#run-summary table { width: auto; }
#run-summary td:nth-child(2) { white-space: nowrap; font-variant-numeric: tabular-nums; }
"""
# The action bar on a phone (max-width 700 px, as the page's other phone rules): one line, Start, Stop, the status
# cut to its width and the fold's button, pinned while the page scrolls; the estimate, the errors of the run and the
# warnings' callout show once it is opened (a warning folded away marks the button with ⚠). A refusal of Start
# shows folded too: it answers the tap on Start. Pinned, the whole bar covered 198 px of an 844 px phone, and 408
# with a warning. Its z-index is above gradio's labels (40) and status overlays (30), which painted over it on both
# sizes, and below the dropdown lists and toasts.
BAR_CSS = """
#action-bar { z-index: 100; background: var(--block-background-fill); }
#bar-toggle { display: none; }
.rloo-bar-toggle { font-size: 1.1em; line-height: 1; padding: 6px 10px; border-radius: 6px; cursor: pointer;
  border: 1px solid var(--border-color-primary); background: var(--button-secondary-background-fill); }
@media (max-width: 700px) {
  #action-line { flex-wrap: nowrap !important; align-items: center; gap: 6px; }
  #action-line > button { min-width: 0 !important; flex: 0 0 auto; padding: 6px 12px; }
  #action-text { min-width: 0 !important; flex: 1 1 0 !important; }
  #bar-toggle { display: block; flex: 0 0 auto; width: auto !important; }
  #bar-toggle .prose { padding: 0; }
  #action-bar:not([data-open]) #run-estimate, #action-bar:not([data-open]) #run-error,
  #action-bar:not([data-open]) #train-alerts, #action-bar:not([data-open]) #alert-open { display: none !important; }
  #action-bar:not([data-open]) #run-status { cursor: pointer; }
  #action-bar:not([data-open]) #run-status .prose { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
  #action-bar:not([data-open]) #run-status .prose * { display: inline; white-space: nowrap !important; }
  #action-bar:has(#train-alerts .rloo-callout) .rloo-bar-toggle::before { content: "⚠ "; color: #C47F17; }
  #action-bar:has(#run-error p) .rloo-bar-toggle::before { content: "⚠ "; color: #D9534F; }
  #action-bar:not([data-open]) #run-status .prose { font-size: 0.9em; }
  /* opened: the status and the estimate the whole width, under the buttons */
  #action-bar[data-open] #action-line { flex-wrap: wrap !important; }
  #action-bar[data-open] #action-text { order: 3; flex: 1 0 100% !important; }
  #bar-toggle { margin-left: auto; }
  .rloo-bar-chevron { display: inline-block; }
  #action-bar[data-open] .rloo-bar-chevron { transform: rotate(180deg); }
}
"""
# the action bar stays in sight while the page scrolls; gradio's container hides its overflow, which makes it the
# scroll box sticky sticks to: clip keeps the look
STICKY_CSS = """
#action-bar { position: sticky; top: 0; z-index: 20; margin-bottom: 10px; }
.gradio-container { overflow: clip !important; }
"""
TRAIN_CSS += STICKY_CSS + BAR_CSS
TOGGLE_HTML = (  # ${value}: its translated name (train.bar_toggle)
    "<button type='button' class='rloo-bar-toggle' aria-expanded='false' aria-controls='action-bar'"
    ' aria-label="${value}" title="${value}">'
    "<span class='rloo-bar-chevron' aria-hidden='true'>▾</span></button>"
)
# The fold: the button, or a tap on the status line, opens and closes the bar (``data-open`` on it, which gradio
# leaves alone when it redraws the bar's components; gradio gives the group's two nested boxes its id, so both)
TOGGLE_JS = """const bars = () => [...document.querySelectorAll('[id="action-bar"]')];
const button = element.querySelector('button');
const toggle = () => { const open = !bars()[0].hasAttribute('data-open');
  bars().forEach((bar) => bar.toggleAttribute('data-open', open));
  button.setAttribute('aria-expanded', String(open)); };
button.addEventListener('click', toggle);
element.closest('#action-bar').addEventListener('click', (e) => {
  if (e.target.closest('#run-status') && getComputedStyle(element).display !== 'none') toggle(); });"""

# Every number box and the prompts' source: a change writes the estimate again, or the refusal by the box's label
