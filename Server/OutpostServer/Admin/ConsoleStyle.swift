/// The admin console's stylesheet (`/admin/console.css`): system fonts, no outside files.
enum ConsoleStyle {
    static let text = #"""
        :root {
          --bg: #f5f6fa;
          --panel: #ffffff;
          --ink: #111827;
          --ink-2: #374151;
          --muted: #6b7280;
          --line: #e5e7eb;
          --line-2: #f0f1f4;
          --side: #0f172a;
          --side-2: #1e293b;
          --side-ink: #cbd5e1;
          --accent: #4f46e5;
          --accent-2: #eef2ff;
          --ok: #059669;
          --warn: #b45309;
          --bad: #dc2626;
          --bad-2: #fef2f2;
          --radius: 10px;
          --sans: -apple-system, BlinkMacSystemFont, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", "DejaVu Sans", sans-serif;
          --mono: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", "DejaVu Sans Mono", monospace;
        }
        * { box-sizing: border-box; }
        [hidden] { display: none !important; }
        html, body { margin: 0; height: 100%; }
        body { font: 14px/1.45 var(--sans); color: var(--ink); background: var(--bg); -webkit-font-smoothing: antialiased; }
        code, .mono { font-family: var(--mono); font-size: 12.5px; }
        code { background: var(--line-2); border-radius: 4px; padding: 1px 5px; }
        h1, h2, h3 { margin: 0; font-weight: 600; letter-spacing: -0.01em; }
        a { color: var(--accent); text-decoration: none; }
        a:hover { text-decoration: underline; }
        .muted { color: var(--muted); }
        .fine { color: var(--muted); font-size: 12px; margin: 14px 0 0; }
        .noscript { padding: 24px; }

        /* Sign-in */
        .signin { min-height: 100%; display: flex; align-items: center; justify-content: center; padding: 24px;
                  background: radial-gradient(1200px 600px at 20% 0%, #e0e7ff 0%, var(--bg) 60%); }
        .signin-card { width: 100%; max-width: 460px; background: var(--panel); border: 1px solid var(--line); border-radius: 14px;
                       padding: 28px 28px 22px; box-shadow: 0 12px 40px rgba(15, 23, 42, 0.08); }
        .signin-card h1 { font-size: 22px; margin: 18px 0 6px; }
        .signin-card p { margin: 0 0 14px; }
        .signin-card label { display: block; font-weight: 600; margin: 6px 0 6px; }
        .signin-card textarea { width: 100%; resize: vertical; font-family: var(--mono); font-size: 12.5px; }
        .signin-card .button { width: 100%; margin-top: 12px; justify-content: center; }

        /* Brand */
        .brand { display: flex; align-items: center; gap: 9px; padding: 2px 8px 18px; }
        .brand img { display: block; border-radius: 7px; }
        .brand-name { font-weight: 700; font-size: 16px; color: #fff; }
        .brand-tag { font-size: 11px; text-transform: uppercase; letter-spacing: 0.08em; color: #a5b4fc;
                     background: rgba(99, 102, 241, 0.18); border-radius: 999px; padding: 2px 8px; }
        .brand-dark { padding: 0; }
        .brand-dark .brand-name { color: var(--ink); }
        .brand-dark .brand-tag { color: var(--accent); background: var(--accent-2); }

        /* Shell */
        .app { display: flex; min-height: 100%; }
        .sidebar { width: 224px; flex: none; background: var(--side); color: var(--side-ink); padding: 18px 12px;
                   display: flex; flex-direction: column; gap: 2px; position: sticky; top: 0; height: 100vh; }
        .nav-link { display: flex; align-items: center; gap: 10px; color: var(--side-ink); padding: 8px 10px; border-radius: 8px; font-weight: 500; }
        .nav-link:hover { background: var(--side-2); color: #fff; text-decoration: none; }
        .nav-link.active { background: var(--accent); color: #fff; }
        .nav-icon { width: 18px; height: 18px; flex: none; fill: none; stroke: currentColor; stroke-width: 2; stroke-linecap: round; stroke-linejoin: round; }
        .sidebar-foot { margin-top: auto; border-top: 1px solid var(--side-2); padding: 14px 6px 0; }
        .whoami { font-size: 12px; color: #94a3b8; margin-bottom: 10px; word-break: break-all; }
        .whoami strong { color: #e2e8f0; font-weight: 600; }
        .main { flex: 1; min-width: 0; display: flex; flex-direction: column; }
        .topbar { display: flex; align-items: center; justify-content: space-between; gap: 16px; padding: 16px 28px;
                  background: var(--panel); border-bottom: 1px solid var(--line); position: sticky; top: 0; z-index: 2; }
        .topbar h1 { font-size: 19px; }
        .topbar-facts { display: flex; gap: 18px; color: var(--muted); font-size: 12.5px; flex-wrap: wrap; justify-content: flex-end; }
        .topbar-facts span strong { color: var(--ink-2); font-weight: 600; }
        .page { padding: 24px 28px 40px; display: flex; flex-direction: column; gap: 20px; }

        /* Panels */
        .panel { background: var(--panel); border: 1px solid var(--line); border-radius: var(--radius); }
        .panel-head { display: flex; align-items: center; justify-content: space-between; gap: 12px; padding: 14px 18px; border-bottom: 1px solid var(--line); }
        .panel-head h2 { font-size: 15px; }
        .panel-head .muted { font-size: 12.5px; }
        .panel-body { padding: 16px 18px; }
        .panel-foot { display: flex; align-items: center; justify-content: space-between; gap: 12px; padding: 10px 18px; border-top: 1px solid var(--line); color: var(--muted); font-size: 12.5px; }
        .grid { display: grid; gap: 16px; }
        .grid-4 { grid-template-columns: repeat(4, minmax(0, 1fr)); }
        .grid-3 { grid-template-columns: repeat(3, minmax(0, 1fr)); }
        .split { display: grid; grid-template-columns: 240px minmax(0, 1fr); gap: 20px; align-items: start; }
        /* Grid items may shrink below their content (a wide table scrolls inside its panel). */
        .grid > *, .split > * { min-width: 0; }
        @media (max-width: 1100px) { .grid-4 { grid-template-columns: repeat(2, minmax(0, 1fr)); } .grid-3 { grid-template-columns: 1fr; } }
        @media (max-width: 860px) { .split { grid-template-columns: 1fr; } .sidebar { width: 64px; } .nav-link { font-size: 0; } .brand-name, .brand-tag, .whoami { display: none; } }

        .stat { padding: 16px 18px; }
        .stat-label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: 0.06em; font-weight: 600; }
        .stat-value { font-size: 20px; font-weight: 600; margin-top: 6px; word-break: break-all; }
        .stat-value.mono { font-size: 14.5px; }
        .stat-note { color: var(--muted); font-size: 12.5px; margin-top: 2px; }

        .chart-card { padding: 14px 18px 12px; }
        .chart-top { display: flex; align-items: baseline; justify-content: space-between; }
        .chart-rate { font-size: 24px; font-weight: 650; }
        .chart-unit { color: var(--muted); font-size: 12.5px; margin-left: 4px; font-weight: 500; }
        .chart { display: block; width: 100%; height: 76px; margin-top: 8px; }

        /* Tables */
        .table-wrap { overflow-x: auto; }
        table { width: 100%; border-collapse: collapse; }
        th { text-align: left; font-size: 11.5px; text-transform: uppercase; letter-spacing: 0.05em; color: var(--muted); font-weight: 600;
             padding: 9px 14px; background: #fafbfc; border-bottom: 1px solid var(--line); white-space: nowrap; }
        td { padding: 9px 14px; border-bottom: 1px solid var(--line-2); vertical-align: top; font-size: 13px; }
        tr:last-child td { border-bottom: none; }
        tbody tr:hover td { background: #fafaff; }
        tr.clickable { cursor: pointer; }
        tr.selected td { background: var(--accent-2) !important; }
        td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
        td.nowrap { white-space: nowrap; }
        .cell-mono { font-family: var(--mono); font-size: 12.5px; }
        .cell-preview { font-family: var(--mono); font-size: 12px; color: var(--ink-2); overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
        .cell-id { font-family: var(--mono); font-size: 12.5px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
        .empty { padding: 28px 18px; text-align: center; color: var(--muted); }
        /* Tables that always fit their panel: fixed columns, long values cut with an ellipsis. */
        table.fixed { table-layout: fixed; }
        table.fixed td { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
        table.fixed td.empty { white-space: normal; }
        col.c-id { width: 17%; }
        col.c-name { width: 30%; }
        col.c-version { width: 6%; }
        col.c-type { width: 14%; }
        col.c-time { width: 19%; }
        col.c-by { width: 14%; }
        col.c-size { width: 8%; }

        /* Badges */
        .badge { display: inline-block; font-size: 11.5px; font-weight: 600; padding: 1px 8px; border-radius: 999px; background: var(--line-2); color: var(--ink-2); white-space: nowrap; }
        .badge-ok { background: #ecfdf5; color: var(--ok); }
        .badge-warn { background: #fffbeb; color: var(--warn); }
        .badge-bad { background: var(--bad-2); color: var(--bad); }
        .badge-accent { background: var(--accent-2); color: var(--accent); }

        /* Forms */
        input[type=text], input[type=number], select, textarea {
          font: inherit; color: var(--ink); background: #fff; border: 1px solid #d1d5db; border-radius: 8px; padding: 7px 10px; outline: none; }
        input:focus, select:focus, textarea:focus { border-color: var(--accent); box-shadow: 0 0 0 3px rgba(79, 70, 229, 0.15); }
        .toolbar { display: flex; align-items: flex-end; gap: 10px; flex-wrap: wrap; }
        .field { display: flex; flex-direction: column; gap: 5px; }
        .field label, .field .label { font-size: 12px; font-weight: 600; color: var(--ink-2); }
        .field input[type=text] { min-width: 220px; }
        .form-grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 14px 18px; max-width: 720px; }
        .form-grid .field input, .form-grid .field select { width: 100%; }
        .button { display: inline-flex; align-items: center; gap: 6px; font: inherit; font-weight: 600; border-radius: 8px; padding: 7px 14px;
                  border: 1px solid #d1d5db; background: #fff; color: var(--ink); cursor: pointer; white-space: nowrap; }
        .button:hover { background: #f9fafb; }
        .button:disabled { opacity: 0.5; cursor: default; }
        .button-primary { background: var(--accent); border-color: var(--accent); color: #fff; }
        .button-primary:hover { background: #4338ca; }
        .button-ghost { background: transparent; color: var(--side-ink); border-color: var(--side-2); width: 100%; justify-content: center; }
        .button-ghost:hover { background: var(--side-2); color: #fff; }
        .button-small { padding: 4px 10px; font-size: 12.5px; }
        .pager { display: flex; gap: 8px; align-items: center; }

        /* Alerts */
        .alert { border-radius: 8px; padding: 9px 12px; font-size: 13px; margin: 10px 0 0; }
        .alert-error { background: var(--bad-2); color: #991b1b; border: 1px solid #fecaca; }
        .alert-info { background: var(--accent-2); color: #3730a3; border: 1px solid #c7d2fe; }

        /* Collections */
        .list { list-style: none; margin: 0; padding: 6px; }
        .list button { display: flex; width: 100%; align-items: center; justify-content: space-between; gap: 8px; border: 0; background: none;
                       font: inherit; text-align: left; padding: 7px 10px; border-radius: 7px; cursor: pointer; color: var(--ink-2); }
        .list button:hover { background: var(--line-2); }
        .list button.active { background: var(--accent-2); color: var(--accent); font-weight: 600; }

        /* Record detail */
        .meta { display: grid; grid-template-columns: minmax(0, 1.6fr) repeat(2, minmax(0, 1fr)); gap: 12px 18px; margin-bottom: 14px; }
        .meta div { min-width: 0; }
        .meta .k { font-size: 11.5px; color: var(--muted); text-transform: uppercase; letter-spacing: 0.05em; font-weight: 600; }
        .meta .v { font-family: var(--mono); font-size: 12.5px; word-break: break-all; margin-top: 2px; }
        pre.json { margin: 0; background: #0b1020; color: #e2e8f0; border-radius: 8px; padding: 14px 16px; overflow: auto; max-height: 520px;
                   font: 12.5px/1.55 var(--mono); white-space: pre-wrap; word-break: break-word; }
        .j-key { color: #93c5fd; }
        .j-str { color: #86efac; }
        .j-num { color: #fcd34d; }
        .j-lit { color: #f9a8d4; }
        .j-punct { color: #94a3b8; }

        /* Media */
        .preview { display: flex; gap: 20px; align-items: flex-start; flex-wrap: wrap; }
        .preview-frame { background: repeating-conic-gradient(#f3f4f6 0% 25%, #fff 0% 50%) 50% / 16px 16px; border: 1px solid var(--line);
                         border-radius: 8px; padding: 10px; min-width: 160px; min-height: 120px; display: flex; align-items: center; justify-content: center; }
        .preview-frame img { display: block; max-width: 520px; max-height: 360px; image-rendering: auto; }

        /* Tokens */
        .token-box { width: 100%; font-family: var(--mono); font-size: 12.5px; background: #0b1020; color: #e2e8f0; border-radius: 8px; border: 0; padding: 12px 14px; resize: none; }
        .row { display: flex; gap: 10px; align-items: center; flex-wrap: wrap; }
        .actions { margin-top: 18px; }
        .stack > * + * { margin-top: 12px; }
        .stack .kv { margin-bottom: 0; }
        .kv { display: flex; gap: 22px; flex-wrap: wrap; color: var(--ink-2); margin-bottom: 12px; }
        .kv span strong { font-weight: 600; color: var(--ink); }
        """#
}
