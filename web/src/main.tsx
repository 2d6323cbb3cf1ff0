import { render } from "preact";
import { App } from "./components/App";
import "./styles.css";
import { initTheme } from "./theme";

initTheme();
const root = document.getElementById("app");
if (root) render(<App />, root);
