; Inno Setup script for GRPO Desktop (Windows). Build the app folder first:
;   python packaging\build.py --variant cpu      (or cuda, from an environment with CUDA torch)
; then, if build.py did not find iscc on PATH:
;   iscc /DAppVersion=0.1.0 packaging\windows\grpo-desktop.iss
; Output: build\GRPO-Desktop-<version>-setup.exe (per-user install, no admin rights needed).
#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif

[Setup]
AppId={{6F1C2A4E-3B7D-4E8A-9C55-2D0B7A1E9F31}
AppName=GRPO Desktop
AppVersion={#AppVersion}
AppPublisher=GRPO Desktop
DefaultDirName={localappdata}\Programs\GRPO Desktop
DefaultGroupName=GRPO Desktop
PrivilegesRequired=lowest
OutputDir=..\..\build
OutputBaseFilename=GRPO-Desktop-{#AppVersion}-setup
SetupIconFile=..\..\resources\icons\grpo-desktop.ico
UninstallDisplayIcon={app}\grpo-desktop.exe
Compression=lzma2/max
SolidCompression=yes
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
WizardStyle=modern

[Files]
Source: "..\..\build\dist\grpo-desktop\*"; DestDir: "{app}"; Flags: recursesubdirs ignoreversion

[Icons]
Name: "{group}\GRPO Desktop"; Filename: "{app}\grpo-desktop.exe"
Name: "{userdesktop}\GRPO Desktop"; Filename: "{app}\grpo-desktop.exe"; Tasks: desktopicon

[Tasks]
Name: "desktopicon"; Description: "Create a desktop shortcut"; Flags: unchecked

[Run]
Filename: "{app}\grpo-desktop.exe"; Description: "Start GRPO Desktop"; Flags: nowait postinstall skipifsilent
