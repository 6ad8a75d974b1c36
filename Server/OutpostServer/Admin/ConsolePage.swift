/// The admin console's HTML page and icon. The page holds no data and no script of its
/// own: `console.js` builds every view with `createElement` and `textContent` from the
/// admin API's answers.
enum ConsolePage {
    /// The page, naming the stylesheet, script and icon by their versioned URLs.
    static func html(style: String, script: String, icon: String) -> String {
        #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <meta name="referrer" content="no-referrer">
        <title>Outpost admin</title>
        <link rel="icon" type="image/svg+xml" href="\#(icon)">
        <link rel="stylesheet" href="\#(style)">
        <script src="\#(script)" defer></script>
        </head>
        <body>
        <noscript><p class="noscript">The Outpost admin console needs JavaScript.</p></noscript>

        <div id="signin" class="signin" hidden>
          <form id="signin-form" class="signin-card" autocomplete="off" novalidate>
            <div class="brand brand-dark"><img src="\#(icon)" alt="" width="28" height="28"><span class="brand-name">Outpost</span><span class="brand-tag">admin</span></div>
            <h1>Sign in</h1>
            <p class="muted">Paste an admin token. On the server, issue one with
              <code>outpost-server token --admin --sub NAME</code>.</p>
            <label for="signin-token">Admin token</label>
            <textarea id="signin-token" rows="4" spellcheck="false" autocapitalize="off" placeholder="eyJhbGciOiJIUzI1NiIs…"></textarea>
            <p id="signin-error" class="alert alert-error" role="alert" hidden></p>
            <button type="submit" id="signin-submit" class="button button-primary">Sign in</button>
            <p class="fine">The token stays in this browser tab (sessionStorage) and is sent as
              <code>Authorization: Bearer</code>. No cookie is set.</p>
          </form>
        </div>

        <div id="app" class="app" hidden>
          <nav class="sidebar" aria-label="Console">
            <div class="brand"><img src="\#(icon)" alt="" width="28" height="28"><span class="brand-name">Outpost</span><span class="brand-tag">admin</span></div>
            <a class="nav-link" href="#/overview" data-page="overview"><svg class="nav-icon" viewBox="0 0 24 24" aria-hidden="true"><polyline points="3 12 7 12 10 5 14 19 17 12 21 12"/></svg>Overview</a>
            <a class="nav-link" href="#/spaces" data-page="spaces"><svg class="nav-icon" viewBox="0 0 24 24" aria-hidden="true"><rect x="3" y="3" width="7" height="7" rx="1.5"/><rect x="14" y="3" width="7" height="7" rx="1.5"/><rect x="3" y="14" width="7" height="7" rx="1.5"/><rect x="14" y="14" width="7" height="7" rx="1.5"/></svg>Spaces</a>
            <a class="nav-link" href="#/records" data-page="records"><svg class="nav-icon" viewBox="0 0 24 24" aria-hidden="true"><ellipse cx="12" cy="5" rx="8" ry="3"/><path d="M4 5v14c0 1.7 3.6 3 8 3s8-1.3 8-3V5"/><path d="M4 12c0 1.7 3.6 3 8 3s8-1.3 8-3"/></svg>Records</a>
            <a class="nav-link" href="#/media" data-page="media"><svg class="nav-icon" viewBox="0 0 24 24" aria-hidden="true"><rect x="3" y="4" width="18" height="16" rx="2"/><circle cx="9" cy="10" r="2"/><path d="M21 16l-5-5-9 9"/></svg>Media</a>
            <a class="nav-link" href="#/devices" data-page="devices"><svg class="nav-icon" viewBox="0 0 24 24" aria-hidden="true"><rect x="7" y="2" width="10" height="20" rx="2"/><path d="M11 18h2"/></svg>Devices</a>
            <a class="nav-link" href="#/access" data-page="access"><svg class="nav-icon" viewBox="0 0 24 24" aria-hidden="true"><path d="M12 3l8 4v5c0 5-3.5 8-8 9-4.5-1-8-4-8-9V7z"/><path d="M9 12l2 2 4-4"/></svg>Access</a>
            <a class="nav-link" href="#/tokens" data-page="tokens"><svg class="nav-icon" viewBox="0 0 24 24" aria-hidden="true"><circle cx="8" cy="15" r="4"/><path d="M11 12l9-9M17 6l3 3M15 8l2 2"/></svg>Tokens</a>
            <div class="sidebar-foot">
              <div id="whoami" class="whoami"></div>
              <button type="button" id="signout" class="button button-ghost">Sign out</button>
            </div>
          </nav>
          <main class="main">
            <header class="topbar">
              <h1 id="page-title">Overview</h1>
              <div id="topbar-facts" class="topbar-facts"></div>
            </header>
            <section id="page" class="page" aria-live="polite"></section>
          </main>
        </div>
        </body>
        </html>

        """#
    }

    /// The console's icon.
    static let icon = #"""
        <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="8" fill="#4f46e5"/><path d="M16 5.5 25 12v14.5h-5.5V19h-7v7.5H7V12z" fill="#fff"/><circle cx="16" cy="13.5" r="2.4" fill="#4f46e5"/></svg>

        """#
}
