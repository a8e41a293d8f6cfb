// The JavaScript check (`python build.py check`): ESLint's recommended rules over the
// site's own modules; third-party code under web/vendor is not ours to lint.
import js from "@eslint/js";
import globals from "globals";

export default [
  { ignores: ["web/vendor/**"] },
  js.configs.recommended,
  {
    files: ["web/**/*.js", "web/**/*.mjs"],
    languageOptions: {
      ecmaVersion: 2023,
      sourceType: "module",
      globals: { ...globals.browser, ...globals.worker, loadPyodide: "readonly" },
    },
    rules: {
      // a leading underscore names what is deliberately unused (a destructured part, a caught error)
      "no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrorsIgnorePattern: "^_" }],
    },
  },
];
